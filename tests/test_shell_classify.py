"""The shell tool's read-only classifier: an allow-list of programs and options.

Every command here that gives ``EXECUTE`` writes, runs a program, changes
what a later command runs, or could do one of these through a form the
classifier does not parse (an abbreviation, a glob, a quoted builtin). The
property test in ``stress/test_classifier_properties.py`` runs what gives
``READ`` in a read-only sandbox.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from toolexec import SideEffects
from toolexec._tools._shell_classify import _GLOB_SAFE, _OPTIONS, _PROGRAMS, classify_arguments
from toolexec.tools import classify_shell_command

ROOT = Path(__file__).resolve().parent.parent


def _read(command: str) -> bool:
    return classify_shell_command(command) is SideEffects.READ


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "ls -la --color=never src",
        "ls -l --color src",
        "cat a.txt | grep -n foo | head -5",
        "grep 'a|b;c>d' file.txt",
        "grep -rn TODO src | head",
        "grep -e-x file",  # an attached argument may start with a dash
        "grep -A 3 --include='*.py' -r foo .",
        "egrep -c 'a|b' f",
        "find . -name '*.py' -type f",
        "find -L . '(' -name a -o -name b ')' -print0",
        "find . -newermt 2024-01-01 -maxdepth 2 -printf '%p\\n'",
        "find . -name -exec",  # -exec is the pattern -name looks for
        "wc -l *.py && echo done",
        "du -sh *",
        "file --brief a.txt",
        "file -bi a.txt",
        "ls; pwd || true",
        "head -n 5 a.txt",
        "head -5 a.txt",
        "head -n5 a.txt",
        "tail --lines=20 log.txt",
        "rg -n --glob '*.py' foo",
        "rg -uu -e foo -- -x",
        "rg --color never foo src",
        "diff -u a b",
        "diff --to-file=b a c",
        "cmp -s a b",
        "od -w16 -An a",
        "od -c a",
        "printf '%s\\n' *",
        "printf '%d\\n' 'a[$(touch pwned)]'",  # printf's numbers are not arithmetic
        "echo 'a[$(touch pwned)]' -n",
        "echo -e 'a\\tb'",
        "cat ~/notes.txt",
        "'ls' -l",
        "l's' -l",
        "ls -- -rf",
        "stat -c %s a",
        "md5sum -c sums",
        "basename -s .py a.py",
        "realpath --relative-to=. x",
        "cut -d: -f1 /etc/passwd",
        "nl -ba a",
        "readlink -f x",
        "id -un",
        "uname -a",
        "whoami",
        "which -a ls",
        "df -h .",
        "pwd -P",
        "false x",
        "sha256sum a",
        "tr -d x",
        "ls --help",
        "grep --version",
    ],
)
def test_read_only_commands_are_read(command: str) -> None:
    assert classify_shell_command(command) is SideEffects.READ


@pytest.mark.parametrize(
    "command",
    [
        # bash evaluates an array subscript as arithmetic, even from a quoted word
        "printf -v 'a[$(touch pwned)]' %s 1",
        "printf -v PATH %s bin; ls",  # the next command comes from bin/
        "printf -vPATH %s bin",
        "printf '-v' x y",
        "printf -- %s x",
        "printf * ",  # a file named -v makes this printf -v
        # ripgrep runs programs: preprocessors, decompressors, a hostname program
        "rg --pre cat x",
        "rg --pre=cat x",
        "rg --pr cat x",
        "rg --pre-glob '*.gz' x",
        "rg -z x",
        "rg -zn x",
        "rg -nz x",
        "rg --search-zip x",
        "rg --hostname-bin=touch --hyperlink-format=x y",
        "rg foo *",  # a file named --pre=touch
        "rg -e --pre=touch",  # the next-word argument may not look like an option
        # find writes and runs programs
        "find . -delete",
        "find . -exec rm {} +",
        "find . -exec rm '{}' ';'",
        "find . -execdir rm '{}' ';'",
        "find . -ok rm '{}' ';'",
        "find . -okdir rm '{}' ';'",
        "find . -fprint out",
        "find . -fprint0 out",
        "find . -fprintf out %p",
        "find . -fls out",
        "find . -ex'ec' rm x",
        "find . -name *.py",
        "find src* -print",
        "find -D exec .",
        "find -O3 .",
        "find . -name x -o -unknown",
        # sort writes: -o, temporary files (-T, -S, --batch-size, large input), and compresses them
        "sort -u names.txt",
        "sort -o out.txt in.txt",
        "sort --compress-program=gzip in.txt",
        "sort -T /tmp x",
        "sort -S 1 x",
        # diff pages through pr
        "diff -l a b",
        "diff --paginate a b",
        "diff -ul a b",
        "diff --pag a b",
        "diff * ",  # a file named --paginate
        # file runs decompressors, sets access times, compiles magic
        "file -z a.gz",
        "file -Z a.zst",
        "file --uncompress a.gz",
        "file -bz a.gz",
        "file -p a",
        "file --preserve-date a",
        "file -C -m magic",
        "file --comp",
        "file -S a",
        "file *",
        # df --sync flushes every file system
        "df --sync",
        "df --sy",
        # tail's follow modes wait for writers
        "tail -f log",
        "tail -F log",
        "tail --follow=name log",
        "tail --pid=1 -f log",
        "tail -5f log",
        # abbreviated long options (getopt expands them), unknown options, bad arguments
        "ls --al",
        "grep --colo=never x f",
        "ls -W",
        "grep -X egrep x",
        "cat --show-all=yes a",
        "head -n",
        "head -n -5 a",
        # builtins that assign, evaluate arithmetic, change the shell or run code
        "read x",
        "declare x=1",
        "typeset x",
        "local x",
        "let 'a[$(touch pwned)]'",
        "export PATH=bin",
        "eval ls",
        "source f",
        ". f",
        "cd /",
        "exec ls",
        "command ls",
        "builtin echo",
        "type ls",
        "hash -p bin/ls ls",
        "set -x",
        "shopt -s extglob",
        "alias ls=rm",
        "trap 'rm x' EXIT",
        "ulimit -n 1",
        "umask 0",
        "unset 'a[$(touch pwned)]'",
        "test -v 'a[$(touch pwned)]'",
        "[ -v 'a[$(touch pwned)]' ]",
        "[[ 'a[$(touch pwned)]' -eq 1 ]]",
        "(( a[1] ))",
        "mapfile x",
        "readarray x",
        "getopts a x",
        "wait",
        "kill 0",
        "enable -n echo",
        "coproc ls",
        "time ls",
        "! ls",
        # assignments before a command
        "A=1 ls",
        "PATH=bin ls",
        "LC_ALL=C grep x f",
        "BASH_ENV=f ls",
        # redirections, expansions and shell syntax
        "ls > out.txt",
        "ls >> out.txt",
        "cat < in.txt",
        "ls 2> err",
        "ls &> out",
        "cat <<< x",
        "ls 2>&1",
        "echo $(rm x)",
        "echo `rm x`",
        "echo $HOME",
        "echo ${x}",
        "echo $((1))",
        'echo "$HOME"',
        "echo $'a'",
        "ls & rm x",
        "ls |& cat",
        "ls\nrm x",
        "ls;",
        "(ls)",
        "{ ls; }",
        "ls 'unclosed",
        "",
        "ls #; rm x",
        "echo a\\;b",
        # programs off the list, paths, globs as the program
        "rm -rf x",
        "git status",
        "sed -i s/a/b/ f",
        "xargs rm",
        "env ls",
        "nice ls",
        "timeout 1 ls",
        "tee out",
        "uniq a out",
        "tac a",
        "sh -c ls",
        "/bin/ls",
        "./ls",
        "l* -la",
        "cat x | sh",
    ],
)
def test_anything_else_stays_execute(command: str) -> None:
    assert classify_shell_command(command) is SideEffects.EXECUTE


def test_classify_arguments_reads_the_command_argument() -> None:
    assert classify_arguments({"command": "ls"}) is SideEffects.READ
    assert classify_arguments({"command": "rm x"}) is SideEffects.EXECUTE
    assert classify_arguments({}) is SideEffects.EXECUTE


def test_every_program_on_the_list_reads_when_bare() -> None:
    for name in [*_PROGRAMS, "echo", "printf", "true", "false", "find"]:
        assert _read(name), name
        assert _read(f"{name} --help") is (name != "printf"), name  # printf takes no option


def test_every_allowed_option_is_read_and_its_abbreviations_are_not() -> None:
    for name, options in _OPTIONS.items():
        for letter in options.flags:
            assert _read(f"{name} -{letter}"), (name, letter)
        for letter in options.valued:
            assert _read(f"{name} -{letter} 1"), (name, letter)
            assert _read(f"{name} -{letter}1"), (name, letter)
            assert not _read(f"{name} -{letter}"), (name, letter)  # the argument is missing
        for option, kind in options.longs.items():
            form = f"{option}=1" if kind == "=" else option
            assert _read(f"{name} {form}"), (name, option)
            abbreviation = option[:-1]
            if abbreviation not in options.longs:
                assert not _read(f"{name} {abbreviation}"), (name, abbreviation)


def test_globs_only_reach_programs_without_risky_options() -> None:
    for name in _PROGRAMS:
        assert _read(f"{name} -- *") is (name in _GLOB_SAFE), name
    assert set(_PROGRAMS) >= _GLOB_SAFE


def test_the_documented_list_is_the_list() -> None:
    page = (ROOT / "docs" / "tools.md").read_text()
    section = page[page.index("### Read-only commands") :]
    listed = re.search(r"programs:\n\n```text\n(.*?)```", section, re.S)
    assert listed is not None, "docs/tools.md lists the read-only programs in a text block"
    names = {line.split(":")[0].strip() for line in listed.group(1).splitlines()}
    assert names == {*_PROGRAMS, "echo", "printf", "true", "false", "find"}
