from services.analyzer.main import main

main()
