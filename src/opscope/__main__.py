from opscope.cli.app import _console_main

_console_main()
