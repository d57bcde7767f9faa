#!/usr/bin/env python3
"""Finds SASS that reads a uniform register no instruction of its function writes.

ptxas 13.0 (sm_90a) has miscompiled the key kernel twice (both in bench/results/LOG.md: the
8-lane kernels, then the 1- and 2-lane ones of a swizzled staging): a cp.async with an L2
cache hint came out as `LDGSTS [R + UR0], desc[UR1]` with neither uniform register written
anywhere in the kernel, and every launch of those kernels died with "illegal instruction" on
the H200. Uniform registers start undefined, so a read of one that nothing writes is wrong
whatever the program; this finds it in the SASS of the built objects, on a machine without a
GPU, before the code reaches one.

  check_uniform_registers.py [--cuobjdump PATH] OBJECT_OR_ARCHIVE...   disassemble and check
  check_uniform_registers.py --sass FILE                               check a SASS listing

The disassembly is `cuobjdump -sass`, which needs `nvdisasm` beside it or on the PATH (the
CUDA toolkit's, or PyPI's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm: scripts/test.sh
installs them for this check). Exit 0: clean; 1: a read of an unwritten uniform register
(each printed with its function and instruction); 2: bad usage, or no SASS found; 77:
cuobjdump or nvdisasm is missing (CTest reports SKIPPED).
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

SKIP = 77

FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
# "        /*0130*/                   R2UR UR20, R5 ;    /* 0x... */"
INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
UNIFORM = re.compile(r"\bUR(\d+)\b")  # URZ (the zero register) does not match


def split_instruction(text):
    """(opcode, operands) of an instruction without its guard predicate."""
    text = re.sub(r"^@!?U?P[T0-9]+\s+", "", text)
    opcode, _, rest = text.partition(" ")
    operands = [o.strip() for o in rest.split(",")] if rest.strip() else []
    return opcode, operands


def written_registers(opcode, operands):
    """Uniform registers an instruction writes: its first operand when that is a bare URn
    (64-bit forms also write URn+1). A first operand in brackets is an address (a store)."""
    if not operands:
        return set()
    first = UNIFORM.fullmatch(operands[0])
    if first is None:
        return set()
    n = int(first.group(1))
    wide = ".64" in opcode or ".WIDE" in opcode or ".128" in opcode
    return {n, n + 1} if wide else {n}


def read_registers(operands, written):
    """Uniform registers an instruction reads: every URn in its operands except the one
    it writes (the first, when bare)."""
    reads = set()
    for i, operand in enumerate(operands):
        if i == 0 and written:
            continue
        reads.update(int(m) for m in UNIFORM.findall(operand))
    return reads


def parse(lines):
    """{function: [(address, instruction text), ...]} of a cuobjdump / nvdisasm listing."""
    functions, current = {}, None
    for line in lines:
        match = FUNCTION.match(line)
        if match:
            current = functions.setdefault(match.group(1), [])
            continue
        match = INSTRUCTION.match(line)
        if match and current is not None:
            current.append((match.group(1), match.group(2)))
    return functions


def unwritten_reads(functions):
    """[(function, address, instruction, register)] for every read of a uniform register
    that no instruction of the same function writes."""
    problems = []
    for name, instructions in functions.items():
        written = set()
        for _, text in instructions:
            written |= written_registers(*split_instruction(text))
        for address, text in instructions:
            opcode, operands = split_instruction(text)
            for n in sorted(read_registers(operands, written_registers(opcode, operands))):
                if n not in written:
                    problems.append((name, address, text, f"UR{n}"))
    return problems


def find_cuobjdump(explicit):
    """--cuobjdump, $DSAF_CUOBJDUMP, the PATH, then the PyPI wheel in the test venv
    ($DSAF_PYTHON_VENV, which scripts/test.sh fills), or None."""
    found = explicit or os.environ.get("DSAF_CUOBJDUMP") or shutil.which("cuobjdump")
    if found:
        return found
    venv = os.environ.get("DSAF_PYTHON_VENV", "")
    wheels = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "nvidia", "cu*", "bin", "cuobjdump")))
    return wheels[-1] if venv and wheels else None


def cuobjdump_listing(cuobjdump, path, option="-sass"):
    """The lines of `cuobjdump OPTION path` (-sass: the SASS listing; -res-usage: each
    function's registers and stack) of one object file, archive or executable."""
    if not os.path.isfile(path):
        print(f"error: no such object file: {path}", file=sys.stderr)
        sys.exit(2)
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.abspath(cuobjdump)) + os.pathsep + env.get("PATH", "")
    result = subprocess.run([cuobjdump, option, path], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        if "nvdisasm" in result.stderr:
            print(f"SKIP: cuobjdump needs nvdisasm: {result.stderr.strip()}")
            sys.exit(SKIP)
        print(f"error: cuobjdump {option} {path} failed ({result.returncode}): {result.stderr.strip()}", file=sys.stderr)
        sys.exit(2)
    return result.stdout.splitlines()


def read_objects(paths, explicit_cuobjdump, option="-sass"):
    """{path: listing} for each object, one cuobjdump call a file (it takes one); exits
    SKIP (77) when no cuobjdump is found."""
    cuobjdump = find_cuobjdump(explicit_cuobjdump)
    if not cuobjdump or not os.path.exists(cuobjdump):
        print("SKIP: no cuobjdump (the CUDA toolkit's, or PyPI's nvidia-cuda-cuobjdump)")
        sys.exit(SKIP)
    return {path: cuobjdump_listing(cuobjdump, path, option) for path in paths}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("objects", nargs="*", help="object files, archives or cubins with sm_90 SASS")
    parser.add_argument("--sass", help="check this SASS listing instead of disassembling")
    parser.add_argument("--cuobjdump", help="cuobjdump to use (default: $DSAF_CUOBJDUMP, the PATH, the test venv's)")
    args = parser.parse_args()
    if args.sass:
        try:
            with open(args.sass, encoding="utf-8") as f:
                listings = {args.sass: f.read().splitlines()}
        except (OSError, UnicodeDecodeError) as e:
            print(f"error: cannot read the SASS listing {args.sass}: {e}", file=sys.stderr)
            sys.exit(2)
    elif args.objects:
        listings = read_objects(args.objects, args.cuobjdump)  # each function checked within its file
    else:
        parser.error("name objects to disassemble, or --sass FILE")
    functions = instructions = problems = 0
    for path, lines in listings.items():
        parsed = parse(lines)
        functions += len(parsed)
        instructions += sum(len(v) for v in parsed.values())
        for name, address, text, register in unwritten_reads(parsed):
            print(f"{path}: {name} /*{address}*/ {text}: reads {register}, which no instruction of the function writes")
            problems += 1
    if instructions == 0:
        print("error: no SASS instructions found", file=sys.stderr)
        sys.exit(2)
    print(f"{functions} functions, {instructions} instructions: {problems} reads of unwritten uniform registers")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
