from gym_cli.main import main

main()
