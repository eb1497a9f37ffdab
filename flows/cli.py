"""The `dualview` command line: thin wiring over the core, printing JSON a script can read.

Exit codes: 0 when the command did its job (a seed file whose every row was quarantined still
counts: it was read); 2 with one line on stderr when the input cannot be used at all (missing
path, unreadable, unsupported format).

Subcommands live in `flows/commands/`, one `<stage>_cli` module per stage, each with a `register` function.
"""

from __future__ import annotations

import argparse
import sys

from dualview_core.config.profiles import ProfileError
from dualview_core.data.sources import SourceError
from dualview_core.storage.filesystems import unreachable
from flows.commands import (EXIT_OK, EXIT_UNUSABLE, apply_project_env, data_cli, evaluate_cli, experiment_cli,
                            pipeline_cli, synthesize_cli, train_cli)

COMMAND_MODULES = (data_cli, evaluate_cli, experiment_cli, pipeline_cli, synthesize_cli, train_cli)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dualview", description="Dual-view instruction-following retrieval.")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    apply_project_env()
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (SourceError, ProfileError) as exc:
        print(f"dualview: error: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    except BrokenPipeError:  # `dualview ... | head`: the reader left; not an error of ours
        sys.stderr.close()
        return EXIT_OK
    except Exception as exc:  # an object store that cannot be reached: one line, not botocore's traceback
        line = unreachable(exc)
        if line is None:
            raise
        print(f"dualview: error: {line}", file=sys.stderr)
        return EXIT_UNUSABLE


if __name__ == "__main__":
    sys.exit(main())
