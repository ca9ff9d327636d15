"""The ``linkwatch`` command: the top floor, beside the testbed (``docs/architecture.md``).

* :mod:`.main` — parses, mounts the subcommands, turns errors into exit codes;
* ``commands/`` — one thin module per subcommand, each exposing ``app``: parse, load config,
  call the library, return an exit code.
"""
