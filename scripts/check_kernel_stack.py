#!/usr/bin/env python3
"""Checks that named kernels keep their values in registers: the stack frame ptxas gave
each (cuobjdump -res-usage, STACK) within a limit.

A local array that the compiler cannot index at compile time lives in the stack frame, in
local memory, and every access is a load or store through L1 instead of a register read
(e.g. a reduction tree whose step bound is a loop variable, left as a loop). Nothing fails
when it happens; the SASS shows it on a machine without a GPU, so this check names the
production kernels and their limits.

  check_kernel_stack.py [--cuobjdump PATH] OBJECT_OR_ARCHIVE --kernel 'NAME=BYTES' ...
  check_kernel_stack.py --res-usage FILE --kernel 'NAME=BYTES' ...   check a saved listing

NAME is a substring of the demangled function name (c++filt), e.g.
'key_store_kernel<(dsaf::ref::StorageFormat)3, 1, 0>'; every function it matches must have
a stack frame of at most BYTES, and it must match at least one (a renamed kernel must not
pass by matching nothing). Exit 0: within the limits; 1: a kernel over its limit (each
printed); 2: bad usage, no listing, a name that matches nothing; 77: cuobjdump, nvdisasm
or c++filt missing (CTest reports SKIPPED). Every function of every object and
architecture in the listings is checked.
"""

import argparse
import re
import shutil
import subprocess
import sys

from check_uniform_registers import read_objects

SKIP = 77

FUNCTION = re.compile(r"^\s*Function\s+(\S+?):?\s*$")
STACK = re.compile(r"\bSTACK:(\d+)\b")


def parse(lines):
    """[(mangled name, stack bytes)] of a `cuobjdump -res-usage` listing (a function line,
    then its resource line), one entry a function of each object and architecture."""
    stacks, current = [], None
    for line in lines:
        match = FUNCTION.match(line)
        if match:
            current = match.group(1)
            continue
        match = STACK.search(line)
        if match and current is not None:
            stacks.append((current, int(match.group(1))))
            current = None
    return stacks


def demangle(names):
    """{mangled: demangled} by one c++filt call; None if c++filt is missing. A c++filt that
    fails or answers with another line count is an error (exit 2), not a reason to skip."""
    cxxfilt = shutil.which("c++filt")
    if cxxfilt is None:
        return None
    unique = sorted(set(names))
    result = subprocess.run([cxxfilt], input="\n".join(unique) + "\n", capture_output=True, text=True)
    out = result.stdout.splitlines()
    if result.returncode != 0 or len(out) != len(unique):
        print(f"error: c++filt failed ({result.returncode}) or gave {len(out)} names for {len(unique)}",
              file=sys.stderr)
        sys.exit(2)
    return dict(zip(unique, out))


def over_limit(stacks, demangled, limits):
    """([(demangled name, stack, limit)] over their limit, [names that match nothing])."""
    over, unmatched = [], []
    for name, limit in limits:
        matched = [(m, stack) for m, stack in stacks if name in demangled[m]]
        if not matched:
            unmatched.append(name)
        over += [(demangled[m], stack, limit) for m, stack in matched if stack > limit]
    return over, unmatched


def limit_arg(text):
    name, sep, value = text.rpartition("=")
    if not sep or not name or not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=BYTES, got '{text}'")
    return name, int(value)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("objects", nargs="*", help="object files, archives or cubins with sm_90 code")
    parser.add_argument("--res-usage", help="check this saved `cuobjdump -res-usage` listing instead")
    parser.add_argument("--cuobjdump", help="cuobjdump to use (default: $DSAF_CUOBJDUMP, the PATH, the test venv's)")
    parser.add_argument("--kernel", type=limit_arg, action="append", default=[], metavar="NAME=BYTES",
                        help="a demangled-name substring and the most stack its functions may have")
    args = parser.parse_args()
    if not args.kernel:
        parser.error("name at least one --kernel NAME=BYTES")
    if args.res_usage:
        try:
            with open(args.res_usage, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            print(f"error: cannot read the listing {args.res_usage}: {e}", file=sys.stderr)
            sys.exit(2)
    elif args.objects:
        listings = read_objects(args.objects, args.cuobjdump, "-res-usage")
        lines = [line for path in args.objects for line in listings[path]]
    else:
        parser.error("name objects to read, or --res-usage FILE")
    stacks = parse(lines)
    if not stacks:
        print("error: no functions with resource usage found", file=sys.stderr)
        sys.exit(2)
    demangled = demangle([m for m, _ in stacks])
    if demangled is None:
        print("SKIP: no c++filt to demangle the kernel names")
        sys.exit(SKIP)
    over, unmatched = over_limit(stacks, demangled, args.kernel)
    for name in unmatched:
        print(f"error: no function matches '{name}'", file=sys.stderr)
    for name, stack, limit in over:
        print(f"{name}: {stack} bytes of stack frame, at most {limit} allowed")
    if unmatched:
        sys.exit(2)
    print(f"{len(stacks)} functions, {len(args.kernel)} names checked: {len(over)} over their limit")
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
