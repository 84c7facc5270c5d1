"""The ``opscope`` command line: thin, parses arguments, calls the layers, maps errors."""
