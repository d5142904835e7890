from services.registry.main import main

main()
