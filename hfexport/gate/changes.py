"""What a change touched: a git range, file names or ``--models`` turned into the model classes to check.

Model classes are read from the modeling files themselves (``model_classes``: ``ast``, no import, no hand-written
table): every exportable model class of a touched ``modeling_*.py`` is a candidate.

A diff is read at function precision (``touched``): a model type's own modeling, modular or configuration file
whose code changed selects its classes; any other code change under ``src/transformers`` selects the classes whose
impact map holds the touched function (``impact``) and, for classes without a map entry, the ones static analysis
finds running it (``reach``). Each selected class carries why, and how directly it runs the change (``rank``).
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import subprocess
import tokenize
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import reach, touched
from .impact import VARIANT_SEPARATOR, ImpactMap, default_class
from .model_classes import MODEL_FILE, model_classes_in_file, transformers_source_dirs
from .model_sets import GATE_CLASSES
from .touched import Touch, Touches

# hfexport's own exporters (when the gate checks hfexport itself): no map or source analysis covers them, so a
# change there selects the representative set.
EXPORTER_CODE = re.compile(r"(?:^|/)hfexport/exporters/[^/]+\.py$")
# One class per kind of architecture the exporters treat differently: decoder LM, encoder, seq2seq, vision.
REPRESENTATIVE_NAMES = tuple(class_name for _, class_name in GATE_CLASSES)
# The selection's reason names this many reasons (with their class counts); the report's selection has every one.
REASONS_NAMED = 8
# The report keeps the class counts of this many reasons, the largest (a report's objects hold at most 1,000 entries).
REASON_COUNTS_KEPT = 100
# How directly a class runs the change, for the budget's order (lower first): its own file changed, the impact map
# shows it ran the touched code, static analysis finds it N steps away, or only the module's import closure holds it.
RANK_OWN_FILE, RANK_MAP, RANK_STATIC = 0, 1, 2


class SelectionError(ValueError):
    """The change cannot be determined: not a git repository, a bad range, no default branch."""


@dataclass(frozen=True)
class SelectedClass:
    model_type: str
    model_class: str
    file: str | None = None  # relative to the repository root when inside a checkout
    line: int | None = None
    module: str | None = None  # dotted module that defines the class, when known from its file
    reason: str | None = None  # why it was selected: "masking_utils.create_causal_mask changed"
    rank: int = 0  # how directly it runs the change (see RANK_*): the budget runs lower ranks first


@dataclass
class Selection:
    mode: str  # "diff", "files", "models" or "all"
    classes: list[SelectedClass] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # --models / --all names the worker resolves to classes
    representative: bool = False
    variants: bool = False  # names resolve to their type's default head's config variants too (``impact build``)
    reason: str = ""
    notes: list[str] = field(default_factory=list)  # one line per fallback taken (unreadable diff or map)
    # Model type -> its changed modular file (relative to the repository root): its modeling file is regenerated.
    modular: dict[str, str] = field(default_factory=dict)

    @property
    def model_types(self) -> list[str]:
        return sorted({c.model_type for c in self.classes})

    @property
    def reason_counts(self) -> dict[str, int]:
        """How many classes each reason selected, the most first ("N classes run that function")."""
        counts: dict[str, int] = {}
        for selected in {c.model_class: c for c in self.classes if c.reason}.values():
            counts[selected.reason] = counts.get(selected.reason, 0) + 1
        return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))

    def keep_only(self, names: list[str]) -> None:
        """Keep the classes of these model types or class names (``check --only``); the reason says so."""
        wanted = set(names)
        self.classes = [c for c in self.classes if c.model_type in wanted or c.model_class in wanted]
        self.reason = f"{self.reason} (only {', '.join(names)})"

    def as_report(self) -> dict[str, Any]:
        """The report's ``selection`` section; each cell holds its class's own reason (``selected_because``)."""
        return {
            "mode": self.mode,
            "model_types": self.model_types,
            "representative": self.representative,
            "reason": self.reason,
            "reason_counts": dict(list(self.reason_counts.items())[:REASON_COUNTS_KEPT]),
            "notes": list(self.notes),
        }


# ── Git ──


# A git hook (pre-commit) runs with these set for the repository being committed to; inherited, they point
# `git worktree add` and `git -C <other tree>` at the wrong index ("index file open failed: Not a directory").
_HOOK_GIT_VARIABLES = frozenset({"GIT_INDEX_FILE", "GIT_DIR", "GIT_WORK_TREE", "GIT_PREFIX"})


def git(root: Path, *args: str, index_file: Path | None = None, strip: bool = True) -> str:
    env = {name: value for name, value in os.environ.items() if name not in _HOOK_GIT_VARIABLES}
    if index_file is not None:  # an index of hfexport's own, so the repository's own index is never touched
        env["GIT_INDEX_FILE"] = str(index_file)
    result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        message = (result.stderr.strip().splitlines() or ["git failed"])[-1]
        raise SelectionError(f"git {' '.join(args)}: {message}")
    return result.stdout.strip() if strip else result.stdout


def repository_root(path: Path) -> Path:
    try:
        return Path(git(path, "rev-parse", "--show-toplevel"))
    except SelectionError:
        raise SelectionError(f"{path} is not a git repository (pass file names or --models)") from None


def default_branch(root: Path) -> str:
    """The branch a PR would merge into: origin's HEAD, else the first of main/master that exists."""
    try:
        return git(root, "symbolic-ref", "--short", "refs/remotes/origin/HEAD")
    except SelectionError:
        pass
    for candidate in ("origin/main", "origin/master", "main", "master"):
        if (
            subprocess.run(
                ["git", "-C", str(root), "rev-parse", "--verify", "-q", candidate], capture_output=True
            ).returncode
            == 0
        ):
            return candidate
    raise SelectionError("cannot find the default branch (no origin/HEAD, main or master): pass --base")


def resolve_range(root: Path, base: str | None, head: str | None) -> tuple[str, str]:
    """Commit ids of (base, head); base defaults to the merge base of HEAD with the default branch."""
    head_sha = git(root, "rev-parse", "--verify", f"{head or 'HEAD'}^{{commit}}")
    if base is None:
        branch = default_branch(root)
        try:
            return git(root, "merge-base", branch, head_sha), head_sha
        except SelectionError:
            raise SelectionError(f"no merge base between {branch} and {head or 'HEAD'}: pass --base") from None
    return git(root, "rev-parse", "--verify", f"{base}^{{commit}}"), head_sha


def changed_files(root: Path, base: str, head: str | None) -> list[str]:
    """Files changed from ``base`` to ``head`` (to the working tree when head is None), relative to ``root``."""
    args = ["diff", "--name-only", base] + ([head] if head else [])
    return [line for line in git(root, *args).splitlines() if line]


# ── Selections ──


def _modeling_files(model_type: str, root: Path | None) -> list[tuple[Path, Path]]:
    """(file, transformers dir it lives in) of a model type's modeling files, the checkout's first."""
    for directory in transformers_source_dirs(root):
        files = sorted((directory / "models" / model_type).glob("modeling_*.py"))
        if files:
            return [(f, directory) for f in files]
    return []


def _relative(path: Path, root: Path | None) -> str:
    if root is not None and path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    # Outside a checkout: name it as transformers names its own files.
    parts = path.parts
    return (
        "/".join(parts[len(parts) - 1 - parts[::-1].index("transformers") :]) if "transformers" in parts else str(path)
    )


def classes_of_type(model_type: str, root: Path | None) -> list[SelectedClass]:
    selected = []
    for path, _ in _modeling_files(model_type, root):
        if path.stem.startswith(("modeling_tf_", "modeling_flax_")):
            continue
        for name, line in model_classes_in_file(path, root):
            module = f"transformers.models.{model_type}.{path.stem}"
            selected.append(SelectedClass(model_type, name, _relative(path, root), line, module))
    return selected


def select_from_files(
    files: list[str],
    root: Path | None,
    mode: str,
    diff: tuple[Path, str, str | None] | None = None,
    impact: ImpactMap | None = None,
    facts_cache: Path | None = None,
) -> Selection:
    """Map changed files to model classes.

    ``diff`` (repository root, base commit, head commit or None for the working tree) reads what changed at function
    precision, ``files`` then relative to that root; without it each transformers file counts as changed whole.
    ``impact``: the impact map, or None to select by static analysis only. ``facts_cache``: see ``reach.SourceTree``.
    """
    selection = Selection(mode=mode)
    posix = [Path(name).as_posix() for name in files]
    source_files = [name for name in posix if touched.module_of(name)]
    touches = diff_touches(*diff, source_files) if diff else _whole_files(source_files)
    selection.notes += touches.notes
    picked: dict[str, SelectedClass] = {}
    for name in touches.files:
        match = MODEL_FILE.search(name)
        if match:
            own = [replace(c, reason=f"{Path(name).name} changed") for c in classes_of_type(match["type"], root)]
            _pick(picked, own)
            if match["kind"] == "modular":
                selection.modular[match["type"]] = name
    shared = [t for t in touches.touches if not _own_file_only(t.file)]
    if shared:
        _pick(picked, _reached(shared, root, impact, facts_cache))
    if any(EXPORTER_CODE.search(name) for name in posix):
        _pick(picked, _representative(root))
        selection.representative = True
    selection.classes = list(picked.values())
    selection.reason = _summary(selection, touches) or "no code of a model's files or of shared code changed"
    return selection


def _own_file_only(file: str) -> bool:
    """A modular or configuration file: it selects its own model type only (its modeling file holds the code)."""
    match = MODEL_FILE.search(file)
    return bool(match) and match["kind"] != "modeling"


def _pick(picked: dict[str, SelectedClass], classes: list[SelectedClass]) -> None:
    """Add classes; a class selected twice keeps its most direct reason."""
    for selected in classes:
        held = picked.get(selected.model_class)
        if held is None or selected.rank < held.rank:
            picked[selected.model_class] = selected


def _representative(root: Path | None) -> list[SelectedClass]:
    found = []
    for model_type, class_name in GATE_CLASSES:
        located = [c for c in classes_of_type(model_type, root) if c.model_class == class_name]
        found.append(located[0] if located else SelectedClass(model_type, class_name))
    return [replace(c, reason="hfexport's exporters changed (representative set)") for c in found]


def _summary(selection: Selection, touches: Touches) -> str:
    """The selection's one line: its reasons with their class counts, the first ``REASONS_NAMED`` of them."""
    counts = selection.reason_counts
    parts = [f"{reason}: {count} class{'es' if count > 1 else ''}" for reason, count in counts.items()]
    if len(parts) > REASONS_NAMED:
        parts[REASONS_NAMED:] = [f"and {len(parts) - REASONS_NAMED} more reasons"]
    if not parts and touches.touches:
        parts = [f"{touches.touches[0].label} changed: no model class runs it"]
    return "; ".join(parts)


# A class one step from the touched code says how it runs it when that is not by a call; further ones say nothing
# more (their rank tells how far), so that one touched function is one reason ("N classes run that function").
_HOW = {"subclass": " (subclass)", "imports the module": " (imports the module)"}


def _reached(
    touches: list[Touch], root: Path | None, impact: ImpactMap | None, facts_cache: Path | None
) -> list[SelectedClass]:
    """The classes that run touched shared code: the impact map's for the classes it has, static analysis's for the
    rest, and the model types whose modular files copy a touched modeling file's code."""
    complete = root is not None and (root / "src" / "transformers" / "__init__.py").is_file()
    # The jobs' rule (worker_parent.transformers_dir): a complete checkout alone, a partial one over the installed one.
    tree = reach.SourceTree(
        [root / "src" / "transformers"] if complete else transformers_source_dirs(root), facts_cache
    )
    walker = reach.StaticReach(tree)
    mapped = impact.model_classes() if impact else set()
    found: list[SelectedClass] = []
    for touch in {(t.module, t.qualname, t.kind, t.names): t for t in reversed(touches)}.values():
        label = f"{touch.label} changed"
        if impact is not None:
            names = (
                impact.classes_running(touch.unit)
                if touch.kind == "function"
                else impact.classes_with_module(touch.module)
            )
            hits = filter(None, map(walker.locate, sorted(n for n in names if default_class(n) == n)))
            found += [_selected(hit, tree, root, label, RANK_MAP) for hit in hits]
            found += _variants_running(names, walker, tree, root, label)
        for hit in walker.reach(touch, fallback=not MODEL_FILE.search(touch.file)):
            if hit.model_class not in mapped:
                how = _HOW.get(hit.how, "") if hit.distance in (1, reach.CLOSURE_DISTANCE) else ""
                found.append(_selected(hit, tree, root, label + how, RANK_STATIC + hit.distance))
        for model_type, modular in walker.modular_copiers(touch):
            reason = f"{modular} copies {touch.label}"
            found += [replace(c, reason=reason, rank=RANK_STATIC + 1) for c in classes_of_type(model_type, root)]
    tree.save()
    return found


def _variants_running(
    names: set[str], walker: reach.StaticReach, tree: reach.SourceTree, root: Path | None, label: str
) -> list[SelectedClass]:
    """The config variants (``Class@variant``) among the classes whose records ran the touched code, where their
    default class's record did not: a change that only a variant runs is checked on that variant (run after every
    default cell, ``run._by_priority``); one that the default runs too is checked on the default alone."""
    found = []
    for name in sorted(names):
        default = default_class(name)
        hit = walker.locate(default) if default != name and default not in names else None
        if hit is not None:
            variant = name.partition(VARIANT_SEPARATOR)[2]
            selected = _selected(hit, tree, root, f"{label} (config variant {variant} runs it)", RANK_MAP)
            found.append(replace(selected, model_class=name))
    return found


def _selected(hit: reach.Hit, tree: reach.SourceTree, root: Path | None, reason: str, rank: int) -> SelectedClass:
    model_type = reach.model_type_of(hit.module) or ""
    file = _relative(tree.paths[hit.module], root)
    return SelectedClass(model_type, hit.model_class, file, hit.line, hit.module, reason, rank)


# ── The diff at function precision ──


def diff_touches(repo_root: Path, base: str, head: str | None, paths: list[str]) -> Touches:
    """What the diff of ``paths`` (transformers files, relative to ``repo_root``) touched, base and head sides."""
    if not paths:
        return Touches()
    try:
        args = ["diff", "-U0", "--no-renames", "--no-color", "--no-ext-diff", base, *([head] if head else [])]
        lines = touched.changed_lines(git(repo_root, *args, "--", *paths))
    except (SelectionError, touched.DiffError) as error:
        found = _whole_files(paths)
        found.notes.append(f"cannot read the diff ({error}): each changed file counts as changed whole")
        return found
    found = Touches()
    for path, (base_lines, head_lines) in sorted(lines.items()):
        module = touched.module_of(path)
        if module is None:
            continue
        units = []
        for side, commit, changed in (("base", base, base_lines), ("head", head, head_lines)):
            try:
                units += touched.touches_in(_text_at(repo_root, commit, path), changed, module, path, side)
            except (SyntaxError, ValueError, tokenize.TokenError) as error:
                units.append(touched.whole_file(module, path, side))
                found.notes.append(
                    f"{path} does not parse at {side} ({type(error).__name__}): it counts as changed whole"
                )
        if units:
            found.files.append(path)
            found.touches += sorted(units, key=lambda t: t.side != "head")  # the head's lines first, then the base's
    return found


def _whole_files(paths: list[str]) -> Touches:
    return Touches([touched.whole_file(touched.module_of(p) or "", p) for p in paths], list(paths))


def _text_at(repo_root: Path, commit: str | None, path: str) -> str | None:
    """The file at ``commit`` (None: the working tree); None where it does not exist."""
    if commit is None:
        file = repo_root / path
        return file.read_text(encoding="utf-8", errors="replace") if file.is_file() else None
    try:
        return git(repo_root, "show", f"{commit}:{path}", strip=False)
    except SelectionError:
        return None


def select_from_diff(root: Path, base: str, head: str | None, impact: ImpactMap | None = None) -> Selection:
    return select_from_files(changed_files(root, base, head), find_checkout(root), "diff", (root, base, head), impact)


def find_checkout(path: Path) -> Path | None:
    """The nearest directory at or above ``path`` that holds ``src/transformers``."""
    for candidate in [path, *path.parents]:
        if (candidate / "src" / "transformers").is_dir():
            return candidate
    return None


# ── Model names (--models, hfexport export NAME), checked from the source files before any job starts ──

# ("llama", "LlamaConfig") or "llama": "LlamaConfig": transformers' auto modules have written it both ways.
_CONFIG_ENTRY = re.compile(r'"([\w.-]+)"\s*[,:]\s*"\w+Config"')
_CLASS_LINE = re.compile(r"^class (\w+)\(", re.M)


def _transformers_dir(checkout: Path | None) -> Path | None:
    """The transformers package the jobs will import: the checkout's, else the installed one (found, not imported)."""
    if checkout is not None:
        return checkout / "src" / "transformers"
    spec = importlib.util.find_spec("transformers")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def _key(name: str) -> str:
    # A config variant's name ("LlamaForCausalLM@rope_dynamic", tiny_models.variants) names its class.
    return default_class(name).strip().lower().replace("-", "_")


def unknown_model_names(names: list[str], checkout: Path | None) -> dict[str, list[str]]:
    """Each name that is neither a model type (transformers' config mapping) nor a class of a modeling file, with up to
    three close matches. Read from the files in about a second, where resolving imports torch and transformers."""
    package = _transformers_dir(checkout)
    auto = package / "models" / "auto" if package else None
    text = "".join(p.read_text(encoding="utf-8", errors="replace") for p in auto.glob("*.py")) if auto else ""
    types = {_key(t): t for t in _CONFIG_ENTRY.findall(text)}
    if not types:
        return {}  # an unusual layout: the jobs resolve the names and say what they cannot
    unknown = [name for name in names if _key(name) not in types]
    if not unknown:
        return {}
    classes: set[str] = set()
    for path in (package / "models").rglob("modeling_*.py"):
        classes.update(_CLASS_LINE.findall(path.read_text(encoding="utf-8", errors="replace")))
    known = {**types, **{name.lower(): name for name in classes}}
    found: dict[str, list[str]] = {}
    for name in unknown:
        if default_class(name).strip() in classes:
            continue
        close = difflib.get_close_matches(_key(name), list(known), n=3, cutoff=0.8)
        found[name] = [known[match] for match in close]
    return found


def check_model_names(names: list[str], checkout: Path | None) -> None:
    """``SelectionError`` naming every unknown model name, with close matches only when they are close."""
    unknown = unknown_model_names(names, checkout)
    if unknown:
        said = "; ".join(
            f"{name!r}" + (f" (did you mean {', '.join(close)}?)" if close else "") for name, close in unknown.items()
        )
        raise SelectionError(
            f"unknown model type or class {said}: a model type is a key of transformers' CONFIG_MAPPING_NAMES "
            "(llama, bert), a class one its modeling files define (LlamaForCausalLM)"
        )
