"""docs/configuration.md against the code, in both directions.

Each reference table in docs/configuration.md sits between `<!-- NAME ... -->` and
`<!-- end NAME -->` markers; its rows start with the documented name in backquotes. For every
table the set of names documented must equal the set the code defines: a setting added to the
code without a row fails, and so does a row whose setting the code no longer has.

What counts as "defined" (deliberately narrow, so that error messages and comments that mention
a variable do not count as reading it):
- the names themselves live in common/env_names.h (`inline constexpr char kX[] = "KOROVOD_X";`,
  in blocks between `// engine-variables` / `// sidecar-variables` and their `// end` lines); a
  reference `env::kX` stands for its name;
- engine variables: the engine block's constants referenced as `env::kX` in runtime/ (and the
  older `Lookup(getenv, "SUFFIX")`, KOROVOD_SUFFIX);
- sidecar variables: the sidecar block's constants referenced as `env::kX` in sidecar/ and
  runtime/ (and the older `getenv("KOROVOD_X")`, `Required(getenv, "KOROVOD_X"`,
  `Optional(getenv, "KOROVOD_X"`) in C++ sources;
- logging variables: the `kLog...Variable` constants of common/log.h;
- client variables: `os.environ.get("KOROVOD_X"`, `os.environ["KOROVOD_X"]`, `os.getenv(...)`
  in python/;
- set by the operator: the `kEnvXxx = "KOROVOD_X"` (or `= env::kX`) constants of operator/ (what
  worker pods get);
- set by korovodrun: `env.Set("KOROVOD_X"`, `env.Set(env::kX` and `env.Set(prefix + "X"`
  (SetRankVars) in launcher/;
- CRD fields: every leaf property path under spec and status of the openAPIV3Schema
  (objects with x-kubernetes-preserve-unknown-fields, i.e. spec.template and
  spec.sidecar.resources, are leaves: their insides are Kubernetes' own types);
- Helm values: every leaf key of helm/korovod/values.yaml (operator.resources is a leaf: a
  core/v1 ResourceRequirements passed through whole);
- injection annotations and labels: the `kXxxAnnotation` / `kXxxLabel` constants of
  operator/webhook/sidecar_injector.h;
- operator flags: the keys of the flag table in operator/manager/operator_options.cc and the
  boolean flags compared with `flag == "--x"`.
"""
import pathlib
import re

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"


def sources(folders, suffixes):
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in suffixes and path.is_file() and "_test" not in path.name:
                yield path, path.read_text(encoding="utf-8")


def matches(folders, suffixes, pattern, prefix=""):
    names = set()
    for _, text in sources(folders, suffixes):
        names.update(prefix + m for m in re.findall(pattern, text))
    return names


CPP = {".cc", ".h"}


ENV_NAMES = ROOT / "common" / "env_names.h"


def env_name_constants(block=None):
    """{constant: variable} of common/env_names.h, all of them or one marked block's."""
    text = ENV_NAMES.read_text(encoding="utf-8")
    if block is not None:
        begin = text.find(f"// {block}")
        end = text.find(f"// end {block}")
        assert begin >= 0 and end > begin, f"common/env_names.h lacks the {block} markers"
        text = text[begin:end]
    return dict(re.findall(r'\b(k\w+)\[\]\s*=\s*"(KOROVOD_[A-Z0-9_]+)"', text))


def referenced(folders, block):
    """Variables of `block` whose constant folders' C++ sources reference as env::kX."""
    constants = env_name_constants(block)
    return {constants[c] for c in matches(folders, CPP, r'\benv::(k\w+)\b') if c in constants}


def engine_variables():
    return matches(["runtime"], CPP, r'Lookup\(\s*getenv\s*,\s*"([A-Z0-9_]+)"',
                   "KOROVOD_") | referenced(["runtime"], "engine-variables")


def sidecar_variables():
    return matches(
        ["sidecar", "runtime"], CPP,
        r'(?:\bgetenv|Required|Optional)\(\s*(?:getenv\s*,\s*)?"(KOROVOD_[A-Z0-9_]+)"'
    ) | referenced(["sidecar", "runtime"], "sidecar-variables")


def log_variables():
    text = (ROOT / "common" / "log.h").read_text(encoding="utf-8")
    return set(re.findall(r'\bkLog\w*Variable\[\]\s*=\s*"(KOROVOD_[A-Z0-9_]+)"', text))


def client_variables():
    return matches(
        ["python"], {".py"},
        r'os\.(?:environ\.get\(|environ\[|getenv\()\s*"(KOROVOD_[A-Z0-9_]+)"')


def operator_set_variables():
    constants = env_name_constants()
    by_constant = {constants[c] for c in matches(["operator"], CPP, r'\bkEnv\w+\s*=\s*env::(k\w+)')
                   if c in constants}
    return matches(["operator"], CPP, r'\bkEnv\w+\s*=\s*"(KOROVOD_[A-Z0-9_]+)"') | by_constant


def korovodrun_set_variables():
    constants = env_name_constants()
    direct = matches(["launcher"], CPP, r'\.Set\(\s*"(KOROVOD_[A-Z0-9_]+)"') | {
        constants[c] for c in matches(["launcher"], CPP, r'\.Set\(\s*env::(k\w+)')
        if c in constants}
    # SetRankVars(env, "KOROVOD_", p) sets prefix + "RANK", ...
    by_prefix = matches(["launcher"], CPP, r'\.Set\(\s*prefix\s*\+\s*"([A-Z0-9_]+)"',
                        "KOROVOD_")
    return direct | by_prefix


def crd_fields():
    crd = yaml.safe_load((ROOT / "crds" / "korovod.dev_horovodjobs.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    leaves = set()

    def walk(node, path):
        if node.get("type") == "array" and "items" in node:
            node, path = node["items"], path + "[]"
        props = node.get("properties")
        if not props or node.get("x-kubernetes-preserve-unknown-fields"):
            leaves.add(path)
            return
        for key, child in props.items():
            walk(child, path + "." + key)

    for top in ("spec", "status"):
        walk(schema[top], top)
    return leaves


HELM_OPAQUE = {"operator.resources"}


def helm_values():
    values = yaml.safe_load((ROOT / "helm" / "korovod" / "values.yaml").read_text())
    leaves = set()

    def walk(node, path):
        if isinstance(node, dict) and node and path not in HELM_OPAQUE:
            for key, child in node.items():
                walk(child, f"{path}.{key}" if path else key)
        else:
            leaves.add(path)

    walk(values, "")
    return leaves


def injection_keys():
    text = (ROOT / "operator" / "webhook" / "sidecar_injector.h").read_text()
    return set(re.findall(r'\bk\w+(?:Annotation|Label)\s*=\s*"([^"]+)"', text))


def operator_flags():
    text = (ROOT / "operator" / "manager" / "operator_options.cc").read_text()
    return set(re.findall(r'\{"(--[a-z0-9-]+)",', text)) | set(
        re.findall(r'flag == "(--[a-z0-9-]+)"', text))


def documented(marker):
    """The backquoted first cell of every row in the table between the markers."""
    doc = DOC.read_text(encoding="utf-8")
    begin = doc.find(f"<!-- {marker}")
    end = doc.find(f"<!-- end {marker} -->")
    assert begin >= 0 and end > begin, f"docs/configuration.md lacks the {marker} markers"
    names = []
    for line in doc[begin:end].splitlines():
        m = re.match(r"\|\s*`([^`]+)`\s*\|", line)
        if m:
            names.append(m.group(1))
    assert len(names) == len(set(names)), f"{marker}: a row appears twice"
    return set(names)


TABLES = {
    "engine-variables": engine_variables,
    "sidecar-variables": sidecar_variables,
    "log-variables": log_variables,
    "client-variables": client_variables,
    "operator-env": operator_set_variables,
    "korovodrun-env": korovodrun_set_variables,
    "crd-fields": crd_fields,
    "helm-values": helm_values,
    "injection-annotations": injection_keys,
    "operator-flags": operator_flags,
}


@pytest.mark.parametrize("marker", sorted(TABLES))
def test_every_setting_in_the_code_is_documented(marker):
    in_code = TABLES[marker]()
    assert in_code, f"{marker}: extracted nothing from the code; is the pattern stale?"
    missing = sorted(in_code - documented(marker))
    assert not missing, f"docs/configuration.md ({marker}) lacks rows for: {missing}"


@pytest.mark.parametrize("marker", sorted(TABLES))
def test_every_documented_setting_exists_in_the_code(marker):
    stale = sorted(documented(marker) - TABLES[marker]())
    assert not stale, f"docs/configuration.md ({marker}) documents what the code lacks: {stale}"


def test_every_korovod_variable_in_the_code_is_in_some_table():
    """A KOROVOD_* name in a string literal that no extractor above sees is a new way of reading
    the environment: make the extractors see it (or document why it is not a setting)."""
    literal = matches(["runtime", "sidecar", "python", "operator", "common", "launcher"],
                      CPP | {".py"},
                      r'"(KOROVOD_[A-Z0-9_]+)[" =]')
    known = set().union(*(TABLES[m]() for m in TABLES if m.endswith(("variables", "env"))))
    # Error messages quote a variable with its value ("KOROVOD_IFACE=eth9: ...") or describe it.
    unknown = sorted(n for n in literal if n not in known)
    assert not unknown, f"KOROVOD_* names the extractors miss: {unknown}"
