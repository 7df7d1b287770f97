"""The `kelp` command line: run a broker, manage topics, produce and consume.

`main.main()` is the console script; each subcommand lives in its own module
exposing `register(subparsers)`.
"""
