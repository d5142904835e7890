from services.workers.main import main

main()
