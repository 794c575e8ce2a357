#!/usr/bin/env python3
"""Checks that what the project's documents name still exists: every repository path (a link's target, or a
path written in the text) and every `namespace::function` or `Class::member` written in code style, in
README.md, docs/*.md and every README.md of the tree. A document that names a file moved or a function renamed
fails the check, with the document, its line and the name.

    tests/docs/check_docs.py [--root DIR] [DOC.md ...]      (default: the documents of the tree at DIR)

Exit status: 0 when every name resolves, 1 when any does not (each listed), 2 on a usage error.
"""
import argparse
import os
import re
import subprocess
import sys

SOURCE_SUFFIXES = (".cpp", ".hpp", ".cu", ".cuh", ".h", ".py", ".sh", ".cmake", ".txt", ".json")
TOP_FOLDERS = ("host", "kernels", "emu", "tests", "bench", "docs", "scripts", "mnist_io", "cmake", ".ci")
# Namespaces of the libraries the project uses, whose names the documents quote but the tree does not define.
EXTERNAL_ROOTS = {"std", "thrust", "cub", "fmt", "CLI", "nlohmann", "Catch", "boost", "torch", "c10", "at",
                  "nn", "dist", "cuda_std", "testing", "benchmark"}
# What a run makes or the user supplies, never in the tree: build outputs, data, a GPU run's records, runs.
NOT_IN_TREE = ("build/", "data/", ".devdeps/", ".venv", "out/", "runs/")

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")
PATH_IN_TEXT = re.compile(r"(?<![\w./$-])((?:%s)/[\w./-]*[\w/])" % "|".join(re.escape(f) for f in TOP_FOLDERS))
PATH_IN_CODE = re.compile(r"^\.{0,2}/?(?:[\w.-]+/)+[\w.-]*$")
# A type written alone (`TeeListener`, `CudaReplica`) or a function called alone (`make_replicas()`).
TYPE_NAME = re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+$")
CALL = re.compile(r"^([a-z_][a-z0-9_]*_[a-z0-9_]+)\((?:[^()]*)\)$")
SYMBOL = re.compile(r"^((?:[A-Za-z_]\w*::)+)([A-Za-z_~]\w*)?(?:\(.*\))?(?:\(\))?$")
PLACEHOLDER = re.compile(r"[<>*{}$|]|\.\.\.|\bN\b|vN|YYYY|\.\.(?!/)")
FILE_SUFFIXES = SOURCE_SUFFIXES + (".md", ".c", ".cc", ".yml", ".yaml", ".toml", ".jsonl", ".st", ".csv", ".png")
KNOWN_CAPITALS = {"README", "LICENSE", "CHANGELOG", "DESIGN"}


def is_placeholder(path):
    """A path written as a pattern: `results/DATE_h200_COMMIT/`, `vN_name.cu`, `train-bB/...`, or a benchmark's
    name ending in its size (`host/epoch_order/60000`)."""
    if PLACEHOLDER.search(path):
        return True
    parts = [p for p in path.split("/") if p]
    if parts and parts[-1].isdigit():
        return True
    for part in parts:
        stem = part.split(".")[0]
        if stem not in KNOWN_CAPITALS and (re.fullmatch(r"[A-Z][A-Z_]{2,}", stem) or
                                           re.search(r"(?:^|_)[A-Z]{3,}(?:_|$)", stem)):
            return True
    return False


def tracked_files(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, text=True, check=False)
    if out.returncode == 0 and out.stdout.strip():
        return [f for f in out.stdout.splitlines() if os.path.exists(os.path.join(root, f))]
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", "build")]
        files += [os.path.relpath(os.path.join(dirpath, f), root) for f in filenames]
    return files


def default_documents(files):
    return sorted(f for f in files if f.endswith(".md") and (
        f == "README.md" or f.startswith("docs/") or os.path.basename(f) == "README.md"))


class Tree:
    def __init__(self, root, files):
        self.root = root
        self.paths = set(files)
        self.folders = {os.path.dirname(f) for f in files}
        for f in list(self.folders):
            while f:
                f = os.path.dirname(f)
                self.folders.add(f)
        self.basenames = {os.path.basename(f) for f in files}
        self.sources = {}
        for f in files:
            if f.startswith("tests/docs/"):
                continue  # the check and its test name missing things on purpose
            if f.endswith(SOURCE_SUFFIXES) or os.path.basename(f) == "CMakeLists.txt":
                try:
                    with open(os.path.join(root, f), encoding="utf-8", errors="replace") as h:
                        self.sources[f] = h.read()
                except OSError:
                    pass
        self.words = {f: set(re.findall(r"[A-Za-z_~]\w*", text)) for f, text in self.sources.items()}
        self.all_words = set().union(*self.words.values()) if self.words else set()
        self.owner_files = {}

    def has_path(self, path):
        path = os.path.normpath(path)
        return path in self.paths or path in self.folders

    def declares(self, text, name):
        return re.search(r"\b(?:namespace|class|struct|union|enum(?:\s+class)?)\s+(?:[\w:]+::)?%s\b" % re.escape(name),
                         text) or re.search(r"\bnamespace\s+[\w:]*\b%s\b" % re.escape(name), text) or re.search(
                             r"\busing\s+%s\s*=" % re.escape(name), text) or re.search(
                                 r"\}\s*%s\s*;" % re.escape(name), text)

    def has_symbol(self, qualifiers, name):
        """qualifiers: ['Trainer'] for Trainer::run; name: None for a namespace written alone (`cpu::`)."""
        if qualifiers[0] in EXTERNAL_ROOTS:
            return True
        owner = qualifiers[-1]
        if owner not in self.owner_files:
            self.owner_files[owner] = [f for f, text in self.sources.items()
                                       if owner in self.words[f] and self.declares(text, owner)]
        owners = self.owner_files[owner]
        if not owners:
            return False
        if name is None:
            return True
        if any(name in self.words[f] for f in owners):
            return True
        qualified = "%s::%s" % (owner, name)
        return any(qualified in text for text in self.sources.values())


def problems_in(doc, tree):
    found = []
    doc_dir = os.path.dirname(doc)
    with open(os.path.join(tree.root, doc), encoding="utf-8") as h:
        lines = h.read().splitlines()
    fence = False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        checked = set()

        # A relative path resolves against the document's folder, the root, or a folder the same line names
        # (a table row of emu/ may name `src/engine.cpp`).
        line_folders = [os.path.normpath(os.path.join(doc_dir, t.split("#")[0])) for t in LINK.findall(line)]
        line_folders += PATH_IN_TEXT.findall(line)
        line_folders = [f for f in line_folders if f in tree.folders and f]

        def path_exists(path, relative_first):
            if is_placeholder(path):
                return True
            clean = path.split("#")[0].rstrip(":,.;")
            if not clean or clean.startswith(("/", "~")):
                return True
            if any(clean.startswith(p) or ("/" + p) in clean for p in NOT_IN_TREE):
                return True
            bases = [doc_dir, ""] if relative_first else ["", doc_dir]
            return any(tree.has_path(os.path.join(b, clean)) for b in bases + line_folders)

        def report(kind, name):
            if (kind, name) not in checked:
                checked.add((kind, name))
                found.append("%s:%d: %s %s does not exist in the tree" % (doc, number, kind, name))

        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            if not path_exists(target, relative_first=True):
                report("link target", target)
        for code in CODE.findall(line):
            code = code.strip()
            symbol = SYMBOL.match(code)
            if symbol and "/" not in code:
                qualifiers = [q for q in symbol.group(1).split("::") if q]
                if qualifiers and not tree.has_symbol(qualifiers, symbol.group(2)):
                    report("name", code)
                continue
            alone = TYPE_NAME.match(code) or CALL.match(code)
            if alone:
                word = alone.group(1) if alone.re is CALL else code
                if word not in tree.all_words:
                    report("name", code)
                continue
            for word in code.split():
                if "/" not in word and re.fullmatch(r"\w[\w.-]*\.(?:cpp|hpp|cu|cuh|py|sh|cmake)", word):
                    # A file named alone (`trainer.cpp`): beside the document, or anywhere in the tree.
                    if not is_placeholder(word) and word not in tree.basenames:
                        report("file", word)
                    continue
                if "/" in word and PATH_IN_CODE.match(word) and not word.startswith(("http", "//")):
                    top = word.lstrip("./").split("/")[0]
                    relative_ok = top not in TOP_FOLDERS
                    if (top in TOP_FOLDERS or word.endswith(FILE_SUFFIXES)) and not path_exists(word, relative_ok):
                        report("path", word)
        if fence:
            continue
        prose = LINK.sub(" ", line)
        for path in PATH_IN_TEXT.findall(prose):
            if not path_exists(path, relative_first=False):
                report("path", path)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    parser.add_argument("documents", nargs="*")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    files = tracked_files(root)
    docs = args.documents or default_documents(files)
    if not docs:
        print("check_docs.py: no document to check under %s" % root, file=sys.stderr)
        return 2
    tree = Tree(root, files)
    problems = []
    for doc in docs:
        problems += problems_in(doc, tree)
    for p in problems:
        print(p)
    print("check_docs.py: %d document%s, %d name%s that do not exist" % (
        len(docs), "" if len(docs) == 1 else "s", len(problems), "" if len(problems) == 1 else "s"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
