from dlscope.cli import main

main()
