#!/usr/bin/env python3
"""Turns `pub mod x;` into `pub(crate) mod x;` for every library module that nothing outside
the library names (src/main.rs, src/bin/, tests/, benches/, examples/, fuzz/), so that
`#![deny(unreachable_pub)]` and rustc's dead-code lint can see into it. Run from the repository
root after a merge brings new modules, then let cargo fix narrow their items:

    python3 scripts/narrow_pub_mods.py
    sed -i 's/#!\\[deny(unreachable_pub)\\]/#![warn(unreachable_pub)]/' src/lib.rs src/main.rs src/bin/sluice-bench/main.rs
    cargo fix --lib --bins --allow-dirty
    sed -i 's/#!\\[warn(unreachable_pub)\\]/#![deny(unreachable_pub)]/' src/lib.rs src/main.rs src/bin/sluice-bench/main.rs

(`#[cfg(test)]` helper modules are not seen by cargo fix: fix what clippy --all-targets reports.)
"""
import glob
import os
import re

OUTSIDE = (["src/main.rs"] + glob.glob("src/bin/**/*.rs", recursive=True)
           + glob.glob("tests/**/*.rs", recursive=True) + glob.glob("benches/*.rs")
           + glob.glob("examples/**/*.rs", recursive=True) + glob.glob("fuzz/**/*.rs", recursive=True))


def tree(toks, i, prefix, out):
    """Parses one use tree at toks[i] into full paths; returns the index after it."""
    cur = list(prefix)
    while i < len(toks):
        t = toks[i]
        if t == "::":
            i += 1
            continue
        if t == "{":
            i += 1
            while toks[i] != "}":
                i = tree(toks, i, cur, out)
                if toks[i] == ",":
                    i += 1
            return i + 1
        if re.match(r"\w+$", t) and t != "as":
            cur.append(t)
            i += 1
            if i < len(toks) and toks[i] == "::":
                continue
            out.append(cur)
            if i < len(toks) and toks[i] == "as":
                i += 2
            return i
        out.append(cur)
        return i
    out.append(cur)
    return i


def used_modules():
    used = set()
    for f in OUTSIDE:
        text = re.sub(r"//[^\n]*", "", open(f).read())
        toks = re.findall(r'::|\w+|[{},;()<>\[\]&.=!?*]|"[^"]*"', text)
        for i, t in enumerate(toks):
            if t == "sluice" and i + 1 < len(toks) and toks[i + 1] == "::":
                out = []
                tree(toks, i + 2, [], out)
                for path in out:
                    pre = []
                    for p in path:
                        if p[:1].isupper() or p == "self":
                            break
                        pre.append(p)
                    for k in range(1, len(pre) + 1):
                        used.add("::".join(pre[:k]))
    return used


def main():
    used = used_modules()
    changed = []
    for f in glob.glob("src/**/*.rs", recursive=True):
        if f.startswith("src/bin/") or f == "src/main.rs":
            continue
        base = os.path.relpath(f, "src")[:-3].split("/")
        if base[-1] in ("mod", "lib"):
            base = base[:-1]
        text = open(f).read()

        def narrow(m):
            full = "::".join(base + [m.group(2)])
            if full in used:
                return m.group(0)
            changed.append(full)
            return m.group(1) + "pub(crate) mod " + m.group(2) + ";"

        new = re.sub(r"(?m)^(\s*(?:#\[[^\]]*\]\s*)?)pub mod (\w+);", narrow, text)
        if new != text:
            open(f, "w").write(new)
    print("narrowed:", " ".join(sorted(changed)) or "nothing")


if __name__ == "__main__":
    main()
