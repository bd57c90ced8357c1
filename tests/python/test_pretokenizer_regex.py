"""Compares ridge's pre-tokenizer (through tests/tools/pretokenize_tool) with Python references.

* GPT-2, Llama 3 and Qwen 2: the pieces must equal what Python's `regex` module gives for the
  same patterns (matches and the unmatched stretches between them, regex after regex).
* Every other tokenizer.ggml.pre name: the pieces must equal an independent emulation of what
  llama.cpp does (src/unicode.cpp, unicode_regex_split): for a pattern with \\p{..} it replaces
  every non-ASCII code point by one placeholder byte per category (whitespace by \\v), rewrites
  \\p{X} into a class of that byte plus X's ASCII members, and runs an ASCII regex on the result;
  other patterns run on the code points with non-ASCII whitespace replaced by \\v.
  (kimi-k2 and afmoe use hand-written splitters there; the C++ tests cover them.)

Texts: the 46 fixture test strings, random strings over an alphabet of every character kind,
and wiki.test.raw (whole for GPT-2/Llama 3/Qwen 2, the first 40 KB for the rest).

    python3 tests/python/test_pretokenizer_regex.py --write-golden
rewrites tests/tokenizer/golden/pretokenizer_splits.txt (the C++ tests read it) from `regex`.
"""

import os
import pathlib
import random
import subprocess
import sys
import pytest
import regex

# The Unicode version ridge's tables and llama.cpp's are made from (scripts/gen-unicode-data).
unicodedata = pytest.importorskip("unicodedata2")

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = pathlib.Path(os.environ.get("RIDGE_FIXTURES", ROOT.parent / "shared" / "fixtures"))
GOLDEN = ROOT / "tests" / "tokenizer" / "golden" / "pretokenizer_splits.txt"
SEPARATOR = "\n__ggml_vocab_test__\n"

# Names whose pieces must equal Python's regex module on the pattern itself.
REGEX_MODULE_NAMES = ["gpt-2", "llama-bpe", "qwen2"]
HAND_WRITTEN = {r"\p{Han}+", r"\p{AFMoE_digits}"}


def find_tool():
    build = os.environ.get("RIDGE_BUILD_DIR")
    dirs = [pathlib.Path(build)] if build else sorted(ROOT.glob("build*"))
    for d in dirs:
        for candidate in (d / "tests" / "pretokenize_tool", d / "pretokenize_tool"):
            if candidate.exists():
                return candidate
    pytest.skip("pretokenize_tool is not built (set RIDGE_BUILD_DIR)")


def fixture_cases():
    text = (FIXTURES / "vocab" / "ggml-vocab-gpt-2.gguf.inp").read_text(encoding="utf-8")
    cases = []
    pos = 0
    while pos < len(text):
        end = text.index(SEPARATOR, pos)
        cases.append(text[pos:end])
        pos = end + len(SEPARATOR)
    assert len(cases) == 46
    return cases


def wiki_text():
    return (FIXTURES / "text" / "wiki.test.raw").read_text(encoding="utf-8")


ALPHABET = (
    list("aAzZsStTrReEvVlLmMdDxX019_'\"!?.,;:-~$+<=>^`|@#%&*()[]{}/\\")
    + [" ", " ", " ", "  ", "    ", "\t", "\n", "\r", "\r\n", "\v", "\x00", "\x1f"]
    + list("éÀßµΣώςжЖ中文一龥あアｱ가힣เกກกຸ")
    + ["\u0301", "\u0e38", "\u00a0", "\u3000", "\u2028", "\u0085", "\u200b", "\ufeff"]
    + list("٣৩Ⅻ½²€©™±—…“”‘’，。、！：；।۔،")
    + ["\U0001F600", "\U00010400", "\U0001E900", "\u1f7d", "\u2126", "\u212a", "\uf900", "\ue000"]
    + ["IMGIMG", "ABZ", "<sentinel:", "12>", "'s", "'LL", "'ve"]
)


def random_cases(count=400, seed=1234):
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 24))) for _ in range(count)]


# --- references -------------------------------------------------------------------------

def split_with(compiled, fragments):
    pieces = []
    for fragment in fragments:
        last = 0
        for m in compiled.finditer(fragment):
            if m.start() > last:
                pieces.append(fragment[last:m.start()])
            if m.end() > m.start():
                pieces.append(fragment[m.start():m.end()])
            last = m.end()
        if last < len(fragment):
            pieces.append(fragment[last:])
    return pieces


def regex_module_split(patterns, text):
    fragments = [text] if text else []
    for pattern in patterns:
        fragments = split_with(regex.compile(pattern), fragments)
    return fragments


def is_white_space(ch):
    return ch.isspace() and not "\x1c" <= ch <= "\x1f"


LLAMA_CATEGORIES = {"\\p{N}": "N", "\\p{L}": "L", "\\p{P}": "P", "\\p{M}": "M", "\\p{S}": "S",
                    "\\p{Lu}": "L", "\\p{Ll}": "L", "\\p{Lt}": "L", "\\p{Lm}": "L", "\\p{Lo}": "L"}
PLACEHOLDER = {"N": "\xd1", "L": "\xd2", "P": "\xd3", "M": "\xd4", "S": "\xd5"}
ASCII_MEMBERS = {"N": "0-9", "L": "A-Za-z", "P": "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}", "M": "",
                 "S": "\\$\\+<=>\\^`\\|"}


def collapse_text(text):
    out = []
    for ch in text:
        if ord(ch) < 128:
            out.append(ch)
        elif is_white_space(ch):
            out.append("\x0b")
        else:
            out.append(PLACEHOLDER.get(unicodedata.category(ch)[0], "\xd0"))
    return "".join(out)


def collapse_pattern(pattern):
    out = []
    inside = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "[" and (i == 0 or pattern[i - 1] != "\\"):
            out.append(c)
            inside = True
        elif inside and c == "]" and pattern[i - 1] != "\\":
            out.append(c)
            inside = False
        elif pattern.startswith("\\p{", i) and pattern.find("}", i + 3) != -1:
            close = pattern.find("}", i + 3)
            name = pattern[i:close + 1]
            if close <= i + 10 and name in LLAMA_CATEGORIES:
                cat = LLAMA_CATEGORIES[name]
                body = PLACEHOLDER[cat] + ASCII_MEMBERS[cat]
                out.append(body if inside else "[" + body + "]")
                i = close + 1
                continue
            out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


def ecmascript_to_python(pattern):
    # ECMAScript $ is the end of input only; Python's also matches before a final newline.
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + "\\Z"
    return pattern


def llama_cpp_split(patterns, text):
    """What llama.cpp's unicode_regex_split gives, for patterns without hand-written paths."""
    if not text:
        return []
    cuts = [len(text)]
    collapsed = collapse_text(text)
    plain = "".join("\x0b" if ord(ch) > 127 and is_white_space(ch) else ch for ch in text)
    for pattern in patterns:
        uses_categories = any(name in pattern for name in LLAMA_CATEGORIES)
        if pattern in GPT2_LLAMA3_PATTERNS:
            subject, compiled = text, regex.compile(pattern)  # llama.cpp's hand-written path
        elif uses_categories:
            subject = collapsed
            compiled = regex.compile(ecmascript_to_python(collapse_pattern(pattern)), regex.ASCII)
        else:
            subject = plain
            compiled = regex.compile(ecmascript_to_python(pattern), regex.ASCII)
        start = 0
        new_cuts = []
        for end in cuts:
            piece_end = start
            for p in split_with(compiled, [subject[start:end]]):
                piece_end += len(p)
                new_cuts.append(piece_end)
            start = end
        cuts = new_cuts
    pieces, start = [], 0
    for end in cuts:
        pieces.append(text[start:end])
        start = end
    return pieces


GPT2_LLAMA3_PATTERNS = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
}


# --- the tool ---------------------------------------------------------------------------

def tool_patterns(tool, name):
    out = subprocess.run([str(tool), name, "--patterns"], check=True, capture_output=True, text=True).stdout
    return [bytes.fromhex(line).decode("utf-8") for line in out.split()]


def tool_split(tool, name, texts, *flags):
    records = b"".join(b"%d\n" % len(t.encode("utf-8")) + t.encode("utf-8") for t in texts)
    out = subprocess.run([str(tool), name, *flags], input=records, check=True, capture_output=True).stdout
    lines = out.decode().split("\n")
    assert lines[-1] == "" and len(lines) == len(texts) + 1
    return [[int(n) for n in line.split()] for line in lines[:-1]]


def byte_lengths(pieces):
    return [len(p.encode("utf-8")) for p in pieces]


def assert_same(name, texts, got, expected_pieces):
    for text, lengths, pieces in zip(texts, got, expected_pieces):
        assert lengths == byte_lengths(pieces), (
            "%s: %r\n  ridge:    %r\n  expected: %r" % (name, text, lengths, pieces))


@pytest.fixture(scope="module")
def tool():
    return find_tool()


@pytest.fixture(scope="module")
def pattern_groups(tool):
    """Names grouped by their pattern list, one representative each (kimi-k2/afmoe left out)."""
    names = subprocess.run([str(tool), "--list"], check=True, capture_output=True, text=True).stdout.split()
    assert len(names) >= 90
    groups = {}
    for name in names:
        patterns = tuple(tool_patterns(tool, name))
        if not HAND_WRITTEN.intersection(patterns):
            groups.setdefault(patterns, name)
    return groups


@pytest.mark.parametrize("name", REGEX_MODULE_NAMES)
@pytest.mark.parametrize("flags", [(), ("--no-fast-paths",)])
def test_matches_regex_module(tool, name, flags):
    patterns = tool_patterns(tool, name)
    texts = fixture_cases() + random_cases() + [wiki_text()]
    got = tool_split(tool, name, texts, *flags)
    assert_same(name, texts, got, [regex_module_split(patterns, t) for t in texts])


def test_every_name_matches_llama_cpp_emulation(tool, pattern_groups):
    texts = fixture_cases() + random_cases() + [wiki_text()[:40000]]
    assert len(pattern_groups) >= 25
    for patterns, name in pattern_groups.items():
        got = tool_split(tool, name, texts)
        assert_same(name, texts, got, [llama_cpp_split(list(patterns), t) for t in texts])


def test_golden_file_is_current(tool):
    assert GOLDEN.read_text(encoding="utf-8") == render_golden(tool)


def render_golden(tool):
    lines = ["# Pieces (UTF-8 byte lengths) of the 46 ggml-vocab test strings, from Python's regex "
             "module.", "# Regenerate: python3 tests/python/test_pretokenizer_regex.py --write-golden",
             "# name<TAB>case<TAB>lengths"]
    for name in REGEX_MODULE_NAMES:
        patterns = tool_patterns(tool, name)
        for i, text in enumerate(fixture_cases()):
            lengths = byte_lengths(regex_module_split(patterns, text))
            lines.append("%s\t%d\t%s" % (name, i, " ".join(map(str, lengths))))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-golden"]:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(render_golden(find_tool()), encoding="utf-8")
        print("wrote", GOLDEN)
    else:
        sys.exit(pytest.main([__file__, "-q"] + sys.argv[1:]))
