"""The two homes of trust, answer by answer: how a value is written into each language (`core.quoting`)
and what is a secret and how it is handed on (`core.credentials`). Every renderer and the schema call
these; here each answer and each refusal is checked whole, in process."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from sglstack.core import credentials as cred
from sglstack.core import quoting as q
from sglstack.core.credentials import CredentialError, HostLogin

# ---- quoting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "found"), [
    ("plain text, spaces and $VAR", None),
    ("", None),
    ("a\nb", "\\n"),
    ("tab\there", "\\t"),
    ("cr\r", "\\r"),
    ("bell\x07 then \n", "\\x07"),  # the first one is named
    ("nbsp\u00a0", "\\xa0"),
    ("é and 漢字", None),
])
def test_control_character_names_the_first_one_escaped(text, found):
    assert q.control_character(text) == found
    expected = None if found is None else f"holds a control character ({found}): it must be one line of printable text"
    assert q.one_line_problem(text) == expected


@pytest.mark.parametrize(("value", "written"), [
    ("plain", '"plain"'),
    ("", '""'),
    ('say "hi"', '"say \\"hi\\""'),
    ("C:\\path", '"C:\\\\path"'),
    ("$HOME and ${X}", '"\\$HOME and \\${X}"'),
    ("<tag> & 'single'", "\"<tag> & 'single'\""),
    ('\\"$', '"\\\\\\"\\$"'),
])
def test_a_dockerfile_string_reads_back_as_the_value(value, written):
    assert q.dockerfile_string(value) == written


def test_a_dockerfile_string_refuses_a_line_break_naming_it():
    with pytest.raises(q.QuotingError) as err:
        q.dockerfile_string("two\nlines")
    assert str(err.value) == ("Dockerfile value 'two\\nlines' holds a control character (\\n): it must be one line "
                              "of printable text")
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("key", ["org.opencontainers.image.title", "a", "A1", "com.example/key-1_x", "9.x"])
def test_label_keys_like_reverse_dns_pass_unchanged(key):
    assert q.dockerfile_label_key(key) == key


@pytest.mark.parametrize("key", ["", ".hidden", "-dash", "_under", "/slash", "a b", "a=b", 'a"b', "a$b", "a\nb",
                                 "ключ"])
def test_other_label_keys_are_refused_in_one_line(key):
    with pytest.raises(q.QuotingError) as err:
        q.dockerfile_label_key(key)
    assert str(err.value) == (f"label key '{key}' is not like 'org.example.key' (letters, digits, '.', '_', '/', "
                              "'-')")


def test_a_dockerfile_comment_escapes_what_would_start_an_instruction():
    assert q.dockerfile_comment("fine text") == "fine text"
    assert q.dockerfile_comment("x\nRUN rm -rf /") == "x\\nRUN rm -rf /"


@pytest.mark.parametrize(("value", "word"), [
    ("simple", "simple"),
    ("two words", "'two words'"),
    ("it's", "'it'\"'\"'s'"),
    ("$(id)", "'$(id)'"),
    ("", "''"),
])
def test_a_shell_word_is_one_word(value, word):
    assert q.shell_word(value) == word
    assert shlex.split(word) == [value]


def test_a_shell_word_refuses_a_line_break():
    with pytest.raises(q.QuotingError) as err:
        q.shell_word("a\nb")
    assert str(err.value) == ("shell word 'a\\nb' holds a control character (\\n): it must be one line of "
                              "printable text")
    with pytest.raises(q.QuotingError, match=r"^shell word 'x\\ty' holds"):
        q.shell_word_with("x\ty", {"{arch}": "${arch}"})


@pytest.mark.parametrize(("value", "variables", "word"), [
    ("torch-{arch}.whl", {"{arch}": "${arch}"}, '"torch-${arch}.whl"'),
    ("{arch}", {"{arch}": "${arch}"}, '"${arch}"'),
    ("{arch}-{arch}", {"{arch}": "${arch}"}, '"${arch}-${arch}"'),
    ("a b {arch}", {"{arch}": "${arch}"}, '"a b ${arch}"'),
    ("no placeholder", {"{arch}": "${arch}"}, '"no placeholder"'),
    # something a double-quoted word reads specially: each literal part single-quoted, each variable apart
    ("$x-{arch}", {"{arch}": "${arch}"}, "'$x-'\"${arch}\""),
    ('q"-{arch}-`c`', {"{arch}": "${arch}"}, "'q\"-'\"${arch}\"'-`c`'"),
    ("b\\-{arch}", {"{arch}": "${arch}"}, "'b\\-'\"${arch}\""),
    ("{a}{b}$", {"{a}": "${A}", "{b}": "${B}"}, "\"${A}\"\"${B}\"'$'"),
    ("plain words", {}, "'plain words'"),
    ("XL-{arch}", {"{arch}": "${arch}"}, '"XL-${arch}"'),
    ("$HOME", {}, "'$HOME'"),
])
def test_a_shell_word_with_variables_expands_only_the_placeholders(value, variables, word):
    assert q.shell_word_with(value, variables) == word


@pytest.mark.parametrize(("value", "variables"), [
    ("torch-{arch}.whl", {"{arch}": "${arch}"}),
    ("$x-{arch}", {"{arch}": "${arch}"}),
    ('q"-{arch}-`c`', {"{arch}": "${arch}"}),
    ("b\\-{arch}", {"{arch}": "${arch}"}),
    ("{a}{b}$", {"{a}": "${A}", "{b}": "${B}"}),
    ("it's $HOME", {}),
])
def test_the_shell_reads_the_word_back_with_each_placeholder_expanded(value, variables):
    names = {p: v.strip("${}") for p, v in variables.items()}
    env = {"PATH": os.environ["PATH"], **{n: f"<{n}>" for n in names.values()}}
    expected = value
    for placeholder, name in names.items():
        expected = expected.replace(placeholder, env[name])
    word = q.shell_word_with(value, variables)
    out = subprocess.run(["sh", "-c", f"printf %s {word}"], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == expected


@pytest.mark.parametrize(("value", "scalar"), [
    ("plain", '"plain"'),
    ("$HOME and $$", '"$$HOME and $$$$"'),
    ('quote " and \\', '"quote \\" and \\\\"'),
    ("ünïcode", '"ünïcode"'),
    (8080, '"8080"'),
    (True, '"True"'),
])
def test_a_compose_string_doubles_every_dollar_and_keeps_unicode(value, scalar):
    assert q.compose_string(value) == scalar


def test_a_k8s_literal_doubles_every_dollar():
    assert q.k8s_literal("$(POD) $$ $X plain") == "$$(POD) $$$$ $$X plain"
    assert q.k8s_literal("none") == "none"


@pytest.mark.parametrize(("pattern", "good", "bad"), [
    (q.LABEL_KEY_RE, ["a.b", "A/b-c_d"], ["-a", "a b", ""]),
    (q.ENV_NAME_RE, ["HF_TOKEN", "_x", "a1"], ["1A", "A-B", "A.B", ""]),
    (q.APT_PACKAGE_RE, ["libc6", "g++", "libstdc++6:amd64", "curl=7.88.1-10+deb12u5", "python3.11"],
     ["Curl", "a", "-x", "curl=", "pkg:AMD"]),
    (q.PATCH_ID_RE, ["kimi-k25-eagle3", "p1", "a.b_c"], ["Kimi", "-p", "a b", ""]),
])
def test_the_word_patterns_take_and_refuse(pattern, good, bad):
    assert all(pattern.fullmatch(x) for x in good)
    assert not any(pattern.fullmatch(x) for x in bad)


# ---- credentials: URLs -----------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "has"), [
    ("https://pypi.example/simple", False),
    ("https://user:pw@pypi.example/simple", True),
    ("https://token@pypi.example/simple", True),
    ("HTTPS://token@pypi.example/simple", True),
    ("ssh://git@github.com/org/repo", False),
    ("git+ssh://git@github.com/org/repo", False),
    ("ssh+git://git@host/repo", False),
    ("SSH://git@host/repo", False),
    ("ssh://git:pw@host/repo", True),
    ("https://host/path@v1", False),  # an @ in the path is not a user part
])
def test_has_credentials_knows_a_secret_from_an_ssh_login(url, has):
    assert cred.has_credentials(url) is has


@pytest.mark.parametrize(("url", "public", "shown"), [
    ("https://user:pw@pypi.example:8443/simple?x=1#f", "https://pypi.example:8443/simple?x=1#f",
     "https://***@pypi.example:8443/simple?x=1#f"),
    ("https://tok@host/a", "https://host/a", "https://***@host/a"),
    ("https://a@b:c@host/a", "https://host/a", "https://***@host/a"),
    ("https://host/simple", "https://host/simple", "https://host/simple"),
    ("ssh://git@host/repo", "ssh://git@host/repo", "ssh://***@host/repo"),
])
def test_a_url_without_its_credentials_and_as_it_may_be_shown(url, public, shown):
    assert cred.public_url(url) == public
    assert cred.redact_url(url) == shown


def test_redact_text_hides_every_url_user_part_and_each_secret_of_four_characters_or_more():
    text = "fetch https://u:pw@a.example/x failed; retry git+https://tok@b.example/r 'ssh://git@c/r' with s3cr3t"
    assert cred.redact_text(text, ["s3cr3t", "abc", ""]) == (
        "fetch https://***@a.example/x failed; retry git+https://***@b.example/r 'ssh://***@c/r' with ***")
    assert cred.redact_text("abc abcd", ["abc"]) == "abc abcd"
    assert cred.redact_text("abcd abcd", ["abcd"]) == "*** ***"
    assert cred.redact_text("mail me@example.com, see https://example.com/@me") == (
        "mail me@example.com, see https://example.com/@me")


def test_host_login_takes_the_host_lowercased_and_unquotes_login_and_password():
    assert cred.host_login("https://pypi.example/simple") is None
    assert cred.host_login("ssh://git@host/repo") is None
    login = cred.host_login("https://Us%40er:p%2Fw@PyPI.Example:8443/simple")
    assert (login.host, login.login, login.password) == ("pypi.example", "Us@er", "p/w")
    token = cred.host_login("https://tok123@host/simple")
    assert (token.host, token.login, token.password) == ("host", "tok123", "")


@pytest.mark.parametrize("url", ["https://:pw@host/x", "https://a%20b:pw@host/x", "https://a:p%22w@host/x",
                                 "https://a:p%27w@host/x", "https://a:p%5Cw@host/x", "https://a:p%23w@host/x",
                                 "https://a:p%09w@host/x", "https://a%27:pw@host/x"])
def test_a_login_a_netrc_cannot_carry_is_refused_without_the_secret(url):
    with pytest.raises(CredentialError) as err:
        cred.host_login(url)
    assert str(err.value) == (f"'{cred.redact_url(url)}': its user or password is empty or holds a space, quote, "
                              "backslash or '#', which a netrc (how builds and pip/uv receive it) cannot carry")
    assert "pw" not in str(err.value).replace("pip/uv", "")


def test_credentials_without_a_host_are_refused():
    with pytest.raises(CredentialError) as err:
        cred.host_login("https://user:pw@/simple")
    assert str(err.value) == "'https://***@/simple' carries credentials but names no host"


def test_a_login_never_shows_its_password():
    login = HostLogin("host", "alice", "hunter22")
    assert repr(login) == "HostLogin(host='host', login='***')" and "hunter22" not in str(login)


# ---- credentials: netrc and the tools ----------------------------------------------------------------


def test_logins_merge_one_per_host_sorted_and_conflicts_are_refused():
    a, b = HostLogin("b.example", "u", "p"), HostLogin("a.example", "t", "")
    assert cred.merge_logins([a, b, HostLogin("b.example", "u", "p")]) == (b, a)
    assert cred.merge_logins([]) == ()
    for other in (HostLogin("b.example", "u", "q"), HostLogin("b.example", "v", "p")):
        with pytest.raises(CredentialError) as err:
            cred.merge_logins([a, other])
        assert str(err.value) == ("two URLs on host b.example carry different credentials: a netrc (how the build "
                                  "and pip/uv receive them) holds one per host")


def test_the_netrc_holds_one_entry_per_login_and_its_secrets_read_back():
    logins = [HostLogin("a.example", "alice", "hunter22"), HostLogin("b.example", "tok-abc", "")]
    text = cred.netrc_text(logins)
    assert text == ("machine a.example\nlogin alice\npassword hunter22\n"
                    "machine b.example\nlogin tok-abc\npassword \n")
    assert cred.netrc_text([]) == ""
    assert cred.secret_values(logins) == ("hunter22", "tok-abc")
    assert cred.netrc_secrets(text) == ("hunter22", "tok-abc")
    assert cred.netrc_secrets("") == ()
    many = [HostLogin(f"h{i}.example", f"user{i}", f"pass-{i}") for i in range(7)]
    assert cred.netrc_secrets(cred.netrc_text(many)) == tuple(f"pass-{i}" for i in range(7))


def test_the_netrc_is_handed_on_in_memory_and_closed_after():
    with cred.netrc_environment([]) as (env, fds):
        assert (env, fds) == ({}, ())
    logins = [HostLogin("a.example", "alice", "hunter22")]
    with cred.netrc_environment(logins) as (env, fds):
        [fd] = fds
        assert env == {"NETRC": f"/proc/self/fd/{fd}"}
        with open(f"/proc/self/fd/{fd}", encoding="utf-8") as fh:
            assert fh.read() == cred.netrc_text(logins)
        with open(f"/proc/self/fd/{fd}", encoding="utf-8") as fh:  # each open reads it from the start
            assert fh.read().startswith("machine a.example")
        assert os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:sglstack-netrc")
        assert not os.get_inheritable(fd)
    with pytest.raises(OSError):
        os.fstat(fd)


def test_the_netrc_is_closed_when_the_caller_fails():
    with pytest.raises(RuntimeError), cred.netrc_environment([HostLogin("h", "u", "pw12")]) as (_env, fds):
        raise RuntimeError("boom")
    with pytest.raises(OSError):
        os.fstat(fds[0])


def test_git_gets_a_basic_auth_header_for_http_urls_only():
    login = HostLogin("git.example", "alice", "hunter22")
    assert cred.git_auth_environment("https://git.example/org/repo.git", login) == {
        "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.https://git.example/org/repo.git.extraHeader",
        "GIT_CONFIG_VALUE_0": "Authorization: Basic YWxpY2U6aHVudGVyMjI="}
    assert cred.git_auth_environment("HTTP://git.example/r", login)["GIT_CONFIG_KEY_0"] == (
        "http.HTTP://git.example/r.extraHeader")
    assert cred.git_auth_environment("ssh://git@git.example/r", login) == {}
    assert cred.git_auth_environment("https://git.example/r", None) == {}


def test_the_login_for_a_url_is_its_host_s():
    logins = [HostLogin("a.example", "u", "p"), HostLogin("b.example", "v", "q")]
    assert cred.login_for("https://B.Example:443/simple", logins) == logins[1]
    assert cred.login_for("https://c.example/simple", logins) is None
    assert cred.login_for("not a url", logins) is None
    assert cred.login_for("file:///x", [HostLogin("", "u", "p")]) == HostLogin("", "u", "p")


# ---- credentials: env keys that name a secret --------------------------------------------------------


@pytest.mark.parametrize(("key", "secret"), [
    ("HF_TOKEN", True), ("OPENAI_API_KEY", True), ("db-password", True), ("AWS_SECRET_ACCESS_KEY", True),
    ("HUGGING_FACE_HUB_TOKEN", True), ("my.passwd", True), ("GPG_PASSPHRASE", True), ("APIKEY", True),
    ("GCP_CREDENTIALS", True), ("AZURE_CREDENTIAL", True), ("__TOKEN__", True),
    ("TOKENIZER", False), ("KEYBOARD", False), ("MONKEY", False), ("SGLANG_LOG_LEVEL", False), ("", False),
    ("CUDA_VISIBLE_DEVICES", False), ("PASSWORDS", False),
])
def test_names_secret_reads_the_words_of_the_key(key, secret):
    assert cred.names_secret(key) is secret


@pytest.mark.parametrize(("value", "name"), [
    ("${HF_TOKEN}", "HF_TOKEN"), ("${_x1}", "_x1"), ("$HF_TOKEN", None), ("${1X}", None), ("${A}B", None),
    ("x${A}", None), ("${A-B}", None), ("${}", None), ("${A}\n", None),
])
def test_a_secret_reference_is_exactly_one_braced_name(value, name):
    assert cred.secret_reference(value) == name


def test_a_plain_secret_is_refused_and_a_reference_or_a_plain_setting_is_not():
    assert cred.plain_secret_problem("HF_TOKEN", "hf_abc") == (
        "names a secret, so its value must be a reference like '${HF_TOKEN}' (from the deploy environment, the "
        "Kubernetes Secret, or smoke's own environment), not a value written into compose.yaml and the manifests")
    assert cred.plain_secret_problem("HF_TOKEN", "${HF_TOKEN}") is None
    assert cred.plain_secret_problem("HF_TOKEN", "${OTHER}") is None
    assert cred.plain_secret_problem("LOG_LEVEL", "debug") is None
    assert cred.reference_map({"HF_TOKEN": "${HF_TOKEN}", "A": "plain", "B_KEY": "${VAULT_B}"}) == {
        "HF_TOKEN": "HF_TOKEN", "B_KEY": "VAULT_B"}
    assert cred.reference_map({}) == {}


# ---- what a child process is handed ------------------------------------------------------------------

def test_a_tool_never_gets_the_signing_key(monkeypatch):
    monkeypatch.setenv("SGLSTACK_SIGNING_KEY", "-----BEGIN PRIVATE KEY-----\nMC4C\n-----END PRIVATE KEY-----\n")
    monkeypatch.setenv("UV_INDEX_URL", "https://pypi.example/simple")
    env = cred.tool_environment({"NO_COLOR": "1"})
    assert "SGLSTACK_SIGNING_KEY" not in env
    assert (env["UV_INDEX_URL"], env["NO_COLOR"]) == ("https://pypi.example/simple", "1")
    assert cred.tool_environment() == {k: v for k, v in os.environ.items() if k != "SGLSTACK_SIGNING_KEY"}


def test_no_module_hands_a_child_this_processs_whole_environment():
    """uv and pip run packages' build code, compose and bake interpolate variables: each child's environment
    is `tool_environment` (or less), never os.environ as it is."""
    import re
    from pathlib import Path

    import sglstack

    whole = re.compile(r"\{\*\*os\.environ\b|dict\(os\.environ\)|env=os\.environ\b")
    found = [f"{path.relative_to(Path(sglstack.__file__).parent)}:{n}"
             for path in sorted(Path(sglstack.__file__).parent.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if whole.search(line)]
    assert found == []
