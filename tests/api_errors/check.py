#!/usr/bin/env python3
"""Checks that every public call's error list in its header comment
(include/gpuactor/*.h) and in docs/api.md name the same statuses, so the two
cannot drift apart again (issue 30), and that docs/api.md names every limit of
include/gpuactor/limits.h.

A list starts at "Errors:" (or "Errors at the call:", "<name> errors:") and
takes every status name (E...) after it: to the end of the header comment, or
in docs/api.md to the end of that paragraph. An api.md entry starts where a
line (or list item) begins with `gpa_status gpa_<name>(`; a signature
continuing such a line joins its entry. The typed op headers (ops_*.h) carry
one list for the family, which must be gpa_submit's without ENOTFOUND.
Usage: check.py <source dir>. Exit 0 when everything agrees, 1 with a line
per disagreement."""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
inc = os.path.join(root, "include", "gpuactor")
problems = []


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


statuses = set(re.findall(r"X\((E[A-Z]+),", read(os.path.join(inc, "status.h"))))
if not statuses:
    sys.exit("api_errors: no status names found in status.h")
LIST = re.compile(r"\b[Ee]rrors(?:\s+at\s+(?:the\s+call|submit))?:")


def codes(text):
    return {c for c in re.findall(r"\bE[A-Z]+\b", text) if c in statuses}


def header_list(comment):
    m = LIST.search(comment)
    return codes(comment[m.end():]) if m else None


# ---- headers
header = {}   # name -> (file, set)
family = {}   # ops header -> set
for fn in sorted(os.listdir(inc)):
    if not fn.endswith(".h"):
        continue
    text = read(os.path.join(inc, fn))
    if fn.startswith("ops_"):
        top = text[text.find("/*"):text.find("*/")]
        family[fn] = header_list(top)
        continue
    for m in re.finditer(r"^gpa_status (gpa_\w+)\(", text, re.M):
        name, pos = m.group(1), m.start()
        end = text.rfind("*/", 0, pos)
        lst = None
        if end >= 0 and "\n\n" not in text[end:pos]:
            start = text.rfind("/*", 0, end)
            comment = text[start:end]
            # a comment over several declarations: the part naming this one wins
            own = re.search(re.escape(name) + r" errors:", comment)
            lst = codes(comment[own.end():]) if own else header_list(comment)
        header[name] = (fn, lst)
        if lst is None:
            problems.append("%s: %s has no error list in its comment" % (fn, name))

# ---- docs/api.md
api = read(os.path.join(root, "docs", "api.md"))
entries = {}  # name -> set
starts = [m for m in re.finditer(r"^(?:- )?`gpa_status (gpa_\w+)\(", api, re.M)]
bounds = [m.start() for m in starts] + [len(api)]
for i, m in enumerate(starts):
    text = api[m.start():bounds[i + 1]]
    head = re.search(r"\n#", text)
    if head:
        text = text[:head.start()]
    names = [m.group(1)] + re.findall(r"^\s+`gpa_status (gpa_\w+)\(", text, re.M)
    lm = LIST.search(text)
    lst = None
    if lm:
        para = text[lm.end():]
        blank = para.find("\n\n")
        lst = codes(para if blank < 0 else para[:blank])
    for n in names:
        entries[n] = lst

for name, (fn, lst) in sorted(header.items()):
    if name not in entries:
        problems.append("docs/api.md: no entry for %s (%s)" % (name, fn))
        continue
    if entries[name] is None:
        problems.append("docs/api.md: the entry of %s has no error list" % name)
        continue
    if lst is not None and lst != entries[name]:
        problems.append("%s: %s: header %s, docs/api.md %s (only in the header: %s; only in the docs: %s)" % (
            fn, name, sorted(lst), sorted(entries[name]), sorted(lst - entries[name]) or "-",
            sorted(entries[name] - lst) or "-"))

submit = header.get("gpa_submit", (None, None))[1]
for fn, lst in sorted(family.items()):
    if lst is None:
        problems.append("%s: the family comment has no error list" % fn)
    elif submit is not None and lst != submit - {"ENOTFOUND"}:
        problems.append("%s: typed calls list %s, gpa_submit without ENOTFOUND is %s" % (
            fn, sorted(lst), sorted(submit - {"ENOTFOUND"})))

for lim in re.findall(r"^#define (GPA_\w+)", read(os.path.join(inc, "limits.h")), re.M):
    if "`%s`" % lim not in api:
        problems.append("docs/api.md: limit %s (limits.h) is not in the limits table" % lim)

if len(header) < 30:
    problems.append("only %d calls found in the headers: the parser no longer matches them" % len(header))
for p in problems:
    print("api_errors:", p)
print("api_errors: %d calls, %d typed families, %d disagreements" % (len(header), len(family), len(problems)))
sys.exit(1 if problems else 0)
