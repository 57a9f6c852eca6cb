from scrun_lua_check.main import main

main()
