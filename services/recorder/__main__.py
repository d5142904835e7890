from services.recorder.main import main

main()
