"""JSON Schema -> a union of flat conjunctions (the step before regex emission).

Owns :class:`Flattener`, which turns a :class:`~textproc.core.constraints.schema.nodes.Node`
into :class:`~textproc.core.constraints.schema.nodes.Flat` s (``$ref`` resolution by ``$id`` /
``$anchor`` / JSON pointer, ``allOf`` merging, ``anyOf`` / ``oneOf`` and ``dependentRequired``
distributed into a union of flats). Sub-schemas below a flat (property values, items) stay
:class:`Node` s and are flattened when the emitter reaches them.

Keywords JSON Schema does not define, and annotations, are ignored (as the spec says);
assertions that cannot be enforced are an ``InvalidInput`` naming the keyword and its path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from textproc.core.constraints.schema.merge import add_assertions, types_of
from textproc.core.constraints.schema.nodes import Flat, Node, json_equal
from textproc.errors import InvalidInput, short

__all__ = ["Flattener", "MAX_BRANCHES"]

MAX_BRANCHES = 64  # largest union one schema may distribute into (anyOf x anyOf x ...)
# assertions JSON Schema defines that no regular language here enforces
_REFUSED = {
    "not": "negation", "if": "conditional subschemas", "unevaluatedProperties": "annotation-dependent",
    "unevaluatedItems": "annotation-dependent", "propertyNames": "key constraints",
    "maxProperties": "property counts",
    "dependentSchemas": "conditional subschemas", "$dynamicRef": "dynamic references",
    "$recursiveRef": "dynamic references", "maxContains": "bounded contains",
}  # fmt: skip
_LEGACY = ("draft-03", "draft-04", "draft-06", "draft-07")


class Flattener:
    """Resolves and merges; ``max_recursion`` bounds the expansions of one ``$ref`` target on
    a path (deeper, that branch has no value)."""

    def __init__(self, root: Any, *, max_recursion: int, strict: bool = False) -> None:
        self.root = root
        self.strict = strict
        self.max_recursion = max_recursion
        self.legacy = isinstance(root, Mapping) and any(d in str(root.get("$schema", "")) for d in _LEGACY)
        self.by_uri: dict[str, Any] = {}
        self._index(root, "", True)

    # -- resolution ----------------------------------------------------------------------

    def _index(self, schema: Any, base: str, top: bool) -> None:
        if isinstance(schema, list):
            for s in schema:
                self._index(s, base, False)
            return
        if not isinstance(schema, Mapping):
            return
        ident = schema.get("$id", schema.get("id") if self.legacy else None)
        if isinstance(ident, str) and not (self.legacy and "$ref" in schema):
            if ident.startswith("#") and self.legacy:
                self.by_uri.setdefault(urljoin(base, ident), schema)
            else:
                base = urljoin(base, ident)
                self.by_uri.setdefault(urldefrag(base)[0], schema)
        elif top:
            self.by_uri.setdefault("", schema)
        anchor = schema.get("$anchor")
        if isinstance(anchor, str):
            self.by_uri.setdefault(f"{urldefrag(base)[0]}#{anchor}", schema)
        for key, value in schema.items():
            if key in ("enum", "const", "examples", "default") or not isinstance(value, (Mapping, list)):
                continue
            if key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas") or (
                key == "dependencies" and isinstance(value, Mapping)
            ):
                if isinstance(value, Mapping):
                    for sub in value.values():
                        self._index(sub, base, False)
            else:
                self._index(value, base, False)

    def base_of(self, node: Node, schema: Mapping[str, Any]) -> str:
        ident = schema.get("$id", schema.get("id") if self.legacy else None)
        if isinstance(ident, str) and not ident.startswith("#"):
            return urljoin(node.base, ident)
        return node.base

    def resolve(self, ref: Any, node: Node) -> Node | None:
        """The target of ``ref`` as a node, or None when the recursion bound is reached."""
        if not isinstance(ref, str):
            raise InvalidInput(f"$ref {short(ref)} at {node.path}.$ref must be a string")
        uri = urljoin(node.base, ref)
        doc, fragment = urldefrag(uri)
        target: Any
        if fragment.startswith("/") or fragment == "":
            target = self.by_uri.get(doc)
            if target is None and doc == urldefrag(node.base)[0]:
                target = self.root
            if target is None:
                raise InvalidInput(
                    f"$ref {ref!r} at {node.path}.$ref points outside the schema (remote references "
                    f"are not fetched); inline the referenced schema under $defs"
                )
            for raw in fragment.split("/")[1:]:
                part = unquote(raw).replace("~1", "/").replace("~0", "~")
                if isinstance(target, list) and part.isdigit() and int(part) < len(target):
                    target = target[int(part)]
                elif isinstance(target, Mapping) and part in target:
                    target = target[part]
                else:
                    raise InvalidInput(f"$ref {ref!r} at {node.path}.$ref points to nothing in the schema")
        else:
            target = self.by_uri.get(uri)
            if target is None:
                raise InvalidInput(f"$ref {ref!r} at {node.path}.$ref: no $anchor or $id {fragment!r} in the schema")
        key = f"{id(target)}"
        if node.refs.count(key) >= self.max_recursion:
            return None
        base = doc if fragment.startswith("/") or not fragment else node.base
        return Node(target, base, f"{node.path}.$ref({ref})", node.refs + (key,))

    # -- flattening ----------------------------------------------------------------------

    def flatten(self, node: Node) -> list[Flat]:
        """The union of flats equal to ``node``'s schema (empty list: no value fits)."""
        return self.flatten_all([node])

    def flatten_all(self, nodes: list[Node]) -> list[Flat]:
        """The union of flats equal to the conjunction of ``nodes``."""
        terms: list[list[Node]] = [[]]
        for node in nodes:
            terms = _product(terms, self._terms(node, 0), node.path)
            if not terms:
                return []
        out = []
        for term in terms:
            flat = Flat(nodes[0].path if nodes else "$")
            for part in term:
                self._add(flat, part)
                if flat.empty:
                    break
            if not flat.empty and flat.types:
                out.append(flat)
        return out

    def _terms(self, node: Node, depth: int) -> list[list[Node]]:
        """``node`` as a union (outer list) of conjunctions of combinator-free nodes."""
        schema = node.schema
        if schema is True or (isinstance(schema, Mapping) and not schema):
            return [[]]
        if schema is False:
            return []
        if not isinstance(schema, Mapping):
            raise InvalidInput(f"schema {short(schema)} at {node.path} must be an object or a boolean")
        if depth > 200:
            raise InvalidInput(f"schema at {node.path} nests $ref / allOf too deeply")
        node = Node(schema, self.base_of(node, schema), node.path, node.refs)
        for key, what in _REFUSED.items():
            if key in schema:
                raise InvalidInput(f"keyword {key!r} at {node.path}.{key} ({what}) cannot be enforced by a "
                                   f"regular constraint; remove it or restate the schema without it")
        if "contains" in schema and schema.get("minContains", 1) == 0:
            pass  # minContains 0: contains asserts nothing
        terms: list[list[Node]] = [[node]]
        if "$ref" in schema:
            target = self.resolve(schema["$ref"], node)
            if self.legacy:  # before 2019-09, $ref replaces its siblings
                return [] if target is None else self._terms(target, depth + 1)
            if target is None:
                return []
            terms = _product(terms, self._terms(target, depth + 1), node.path)
        if "allOf" in schema:
            for i, sub in enumerate(_schema_list(schema, "allOf", node.path)):
                terms = _product(terms, self._terms(node.child(sub, f".allOf[{i}]"), depth + 1), node.path)
                if not terms:
                    return []
        if "anyOf" in schema:
            union: list[list[Node]] = []
            for i, sub in enumerate(_schema_list(schema, "anyOf", node.path)):
                union.extend(self._terms(node.child(sub, f".anyOf[{i}]"), depth + 1))
            terms = _product(terms, union, node.path)
        if "oneOf" in schema:
            terms = _product(terms, self._one_of(node, depth), node.path)
        for key, deps in _dependencies(schema, node.path, self.legacy):
            # "if key is present, deps are too": key absent, or key and deps required
            absent = node.child({"properties": {key: False}}, f".dependentRequired.{key}")
            present = node.child({"required": [key, *deps]}, f".dependentRequired.{key}")
            terms = _product(terms, [[absent], [present]], node.path)
        return terms

    def _one_of(self, node: Node, depth: int) -> list[list[Node]]:
        branches = []
        for i, sub in enumerate(_schema_list(node.schema, "oneOf", node.path)):
            child = node.child(sub, f".oneOf[{i}]")
            # each branch as it applies: together with the keywords next to the oneOf
            branches.append([(t, self._flat_of(t + [node], child.path)) for t in self._terms(child, depth + 1)])
        for i, a in enumerate(branches):
            for b in branches[i + 1:]:
                for _, fa in a:
                    for _, fb in b:
                        if fa is not None and fb is not None and not disjoint(fa, fb, self):
                            raise InvalidInput(
                                f"oneOf at {node.path}.oneOf: branches {fa.path} and {fb.path} may both "
                                f"match one value, which oneOf forbids and a regular constraint cannot "
                                f"exclude; make the branches disjoint (distinct types or a required "
                                f"property with distinct const values) or use anyOf"
                            )
        return [t for branch in branches for t, f in branch if f is not None]

    def _flat_of(self, term: list[Node], path: str) -> Flat | None:
        flat = Flat(path)
        for part in term:
            self._add(flat, part)
        return None if flat.empty or not flat.types else flat

    def _add(self, flat: Flat, node: Node) -> None:
        """Merge the assertions of a combinator-free ``node`` into ``flat``."""
        add_assertions(flat, node, self.legacy, self.strict)


def disjoint(a: Flat, b: Flat, flattener: Flattener) -> bool:
    """True when no JSON value can satisfy both ``a`` and ``b`` (a sufficient check)."""
    if not types_of(a) & types_of(b):
        return True
    if a.enum is not None and b.enum is not None:
        if not any(json_equal(x, y) for x in a.enum for y in b.enum):
            return True
    if types_of(a) & types_of(b) == {"object"}:
        for key in set(a.required) & set(b.required):
            fa = flattener.flatten_all([p.props[key] for p in a.parts if key in p.props])
            fb = flattener.flatten_all([p.props[key] for p in b.parts if key in p.props])
            if all(disjoint(x, y, flattener) for x in fa for y in fb):
                return True  # (also when one side forbids the key outright)
    return False


def _schema_list(schema: Mapping[str, Any], key: str, path: str) -> list[Any]:
    value = schema[key]
    if not isinstance(value, list) or not value:
        raise InvalidInput(f"{key} {short(value)} at {path}.{key} must be a non-empty list of schemas")
    return value


def _product(a: list[list[Node]], b: list[list[Node]], path: str) -> list[list[Node]]:
    if len(a) * len(b) > MAX_BRANCHES:
        raise InvalidInput(
            f"schema at {path} distributes into over {MAX_BRANCHES} alternatives (anyOf/oneOf "
            f"combined with other anyOf/oneOf/dependencies); simplify it"
        )
    return [x + y for x in a for y in b]


def _dependencies(schema: Mapping[str, Any], path: str, legacy: bool) -> list[tuple[str, list[str]]]:
    out = []
    for key in ("dependentRequired", "dependencies"):
        value = schema.get(key)
        if value is None or (key == "dependencies") != legacy:
            continue  # each draft knows only its own keyword
        if not isinstance(value, Mapping):
            raise InvalidInput(f"{key} {short(value)} at {path}.{key} must be an object")
        for name, deps in value.items():
            if isinstance(deps, list) and all(isinstance(d, str) for d in deps):
                out.append((name, deps))
            elif key == "dependencies":
                raise InvalidInput(f"dependencies.{name} at {path} is a schema (conditional subschemas), "
                                   f"which cannot be enforced by a regular constraint")
            else:
                raise InvalidInput(f"{key}.{name} {short(deps)} at {path} must be a list of property names")
    return out
