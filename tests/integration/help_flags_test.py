#!/usr/bin/python3
"""`BINARY --help` lists every flag that the project's own sources define for
that binary.

absl's --help shows only the flags of files its usage config matches;
--helpfull shows every flag linked in, grouped under "Flags from FILE:". This
takes the flags whose FILE lies under --source_dir from --helpfull (there
must be at least one) and fails when --help leaves any out.

  help_flags_test.py --binary PATH --source_dir DIR

Standard library only. Prints the head of --help, one line per missing flag
and, last, "help_flags_test(NAME): N flags, M missing".
"""

import argparse
import os
import re
import subprocess
import sys

SECTION = re.compile(r"^\s*Flags from (\S+):\s*$")
FLAG = re.compile(r"^\s+--([A-Za-z0-9_]+) \(")
HEAD_LINES = 8


def usage_text(binary, flag):
    """The usage text absl prints for `flag` (it exits non-zero after)."""
    done = subprocess.run([binary, flag], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=60)
    return done.stdout.decode(errors="replace")


def flags_by_file(text):
    """{file: [flag names]} from absl's usage text."""
    files, current = {}, None
    for line in text.splitlines():
        section = SECTION.match(line)
        if section:
            current = files.setdefault(section.group(1), [])
            continue
        flag = FLAG.match(line)
        if flag and current is not None:
            current.append(flag.group(1))
    return files


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--source_dir", required=True)
    args = parser.parse_args()
    name = os.path.basename(args.binary)
    source_dir = os.path.abspath(args.source_dir) + os.sep

    full = flags_by_file(usage_text(args.binary, "--helpfull"))
    # absl's default filename normalizer drops the leading "/" of a path.
    own = {"/" + f.lstrip("/"): flags for f, flags in full.items()
           if ("/" + f.lstrip("/")).startswith(source_dir)}
    wanted = sorted({flag for flags in own.values() for flag in flags})
    if not wanted:
        print("FAIL %s --helpfull lists no flag from a file under %s (files: %s)" % (
            name, source_dir, sorted(full)))
        return 1

    help_text = usage_text(args.binary, "--help")
    print("\n".join(help_text.splitlines()[:HEAD_LINES]))
    shown = {flag for flags in flags_by_file(help_text).values() for flag in flags}
    missing = [flag for flag in wanted if flag not in shown]
    for flag in missing:
        print("FAIL --%s (defined in %s) is missing from %s --help" % (
            flag, ", ".join(f for f, flags in own.items() if flag in flags), name))
    print("help_flags_test(%s): %d flags from %s, %d missing" % (
        name, len(wanted), ", ".join(os.path.relpath(f, source_dir) for f in sorted(own)),
        len(missing)))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.dont_write_bytecode = True
    sys.exit(main())
