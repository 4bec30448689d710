"""Every JSON key and enum value of the four reference pages exists in our descriptors.

Each JSON representation block is matched to the message it documents by its title. Titles are
English type names on most pages (``ScenarioResult``, ``EvaluationResult.GoldenResult``) and are
resolved against our full names; localized titles are translated by ``_LOCALIZED_TITLES``. The
block's keys must all be JSON names of that message. Each enum table must be the values of one of
our enums (names exist; no other enum value table of ours needs to match).
"""

from __future__ import annotations

from google.protobuf import descriptor, descriptor_pool

from tests.support import contract, seeds

# Localized block titles on the Hebrew, Spanish and German pages, and the type each documents.
_LOCALIZED_TITLES = {
    "הערכה": "google.cloud.ces.v1beta.Evaluation",
    "Evaluación": "google.cloud.ces.v1beta.Evaluation",
    "זהוב": "google.cloud.ces.v1beta.Evaluation.Golden",
    "שלב": "google.cloud.ces.v1beta.Evaluation.Step",
    "Paso": "google.cloud.ces.v1beta.Evaluation.Step",
    "תרחיש": "google.cloud.ces.v1beta.Evaluation.Scenario",
    "Situación": "google.cloud.ces.v1beta.Evaluation.Scenario",
    "ערך": "google.protobuf.Value",
    "Valor": "google.protobuf.Value",
    "Wert": "google.protobuf.Value",
    "תמונה": "google.cloud.ces.v1beta.Image",
    "Imagen": "google.cloud.ces.v1beta.Image",
    "Bild": "google.cloud.ces.v1beta.Image",
    "BLOB": "google.cloud.ces.v1beta.Blob",
    "אירוע": "google.cloud.ces.v1beta.Event",
    "Evento": "google.cloud.ces.v1beta.Event",
    "Ereignis": "google.cloud.ces.v1beta.Event",
    "הודעה": "google.cloud.ces.v1beta.Message",
    "Mensaje": "google.cloud.ces.v1beta.Message",
    "Nachricht": "google.cloud.ces.v1beta.Message",
    "חלק": "google.cloud.ces.v1beta.Chunk",
    "Fragmento": "google.cloud.ces.v1beta.Chunk",
    "Intervalo": "google.cloud.ces.v1beta.Span",
    "חותמת הזמן": "google.protobuf.Timestamp",
    "Marca de tiempo": "google.protobuf.Timestamp",
    "Zeitstempel": "google.protobuf.Timestamp",
    "משך": "google.protobuf.Duration",
    "Duración": "google.protobuf.Duration",
    "Dauer": "google.protobuf.Duration",
    "סטטוס": "google.rpc.Status",
    "Estado": "google.rpc.Status",
    "הכול": "google.protobuf.Any",
    "Cualquiera": "google.protobuf.Any",
    "Beliebig": "google.protobuf.Any",
}


def _all_messages(pool: descriptor_pool.DescriptorPool) -> dict[str, descriptor.Descriptor]:
    files, _ = contract.ours()
    found: dict[str, descriptor.Descriptor] = {}

    def visit(message: descriptor.Descriptor) -> None:
        found[message.full_name] = message
        for nested in message.nested_types:
            visit(nested)

    for file in files.file:
        for message in pool.FindFileByName(file.name).message_types_by_name.values():
            visit(message)
    return found


def _resolve(block: seeds.SeedBlock, messages: dict[str, descriptor.Descriptor]) -> list[str]:
    """Candidate full names for ``block`` from its title lines, nearest title first."""
    for heading in block.headings:
        title = heading.removeprefix("Ressource: ").removeprefix("Resource: ").strip()
        if title in _LOCALIZED_TITLES:
            return [_LOCALIZED_TITLES[title]]
        candidates = [n for n in messages if n == title or n.endswith("." + title)]
        if candidates:
            return candidates
    return []


def _block_gaps(
    where: str, block: seeds.SeedBlock, messages: dict[str, descriptor.Descriptor]
) -> list[str]:
    candidates = _resolve(block, messages)
    if not candidates:
        return [f"{where}: cannot tell which message {block.headings[0]!r} is"]

    def gaps(name: str) -> set[str]:
        return set(block.keys) - {f.json_name for f in messages[name].fields}

    # A short title such as "ToolExpectation" may name several nested types; the block documents
    # the one that has its keys.
    best = min(candidates, key=lambda n: len(gaps(n)))
    return [f"{where}: {best} has no JSON field {k!r}" for k in sorted(gaps(best))]


def test_every_seed_json_key_exists_in_the_documented_message() -> None:
    _, pool = contract.ours()
    messages = _all_messages(pool)
    missing: list[str] = []
    checked = 0
    for page in seeds.load_pages():
        for block in page.blocks:
            missing += _block_gaps(f"{page.path.name}:{block.line}", block, messages)
            checked += len(block.keys)
    print(f"seed coverage: {checked} JSON keys checked; {len(missing)} missing")
    assert missing == []
    assert checked > 1500


def test_every_seed_enum_value_exists() -> None:
    _, pool = contract.ours()
    files, _ = contract.ours()
    enums: list[set[str]] = []

    def visit_enums(container: descriptor.Descriptor | descriptor.FileDescriptor) -> None:
        for enum in container.enum_types_by_name.values():
            enums.append({v.name for v in enum.values})
        if isinstance(container, descriptor.Descriptor):
            nested = container.nested_types
        else:
            nested = list(container.message_types_by_name.values())
        for message in nested:
            visit_enums(message)

    for file in files.file:
        visit_enums(pool.FindFileByName(file.name))
    missing: list[str] = []
    checked = 0
    for page in seeds.load_pages():
        for table in page.enums:
            checked += len(table.values)
            if not any(set(table.values) <= values for values in enums):
                missing.append(f"{page.path.name}:{table.line}: no enum has {table.values}")
    print(f"seed coverage: {checked} enum values checked; {len(missing)} missing")
    assert missing == []
    assert checked > 300


def test_block_check_reports_keys_the_titled_message_lacks() -> None:
    """Keys are checked against the titled message, never against any message that has them:
    ``SessionInput`` has both ``event`` and ``variables``, yet an ``Event`` block with an unknown
    key must fail."""
    _, pool = contract.ours()
    messages = _all_messages(pool)

    def block(title: str, *keys: str) -> seeds.SeedBlock:
        return seeds.SeedBlock(1, frozenset(keys), frozenset(), (title,))

    assert _block_gaps("x", block("Evento", "event", "variables"), messages) == []
    assert _block_gaps("x", block("Evento", "event", "text"), messages) == [
        "x: google.cloud.ces.v1beta.Event has no JSON field 'text'"
    ]
    assert _block_gaps("x", block("ToolExpectation", "expectedToolCall"), messages) == []
    assert _block_gaps("x", block("Unbekannt", "event"), messages) == [
        "x: cannot tell which message 'Unbekannt' is"
    ]
