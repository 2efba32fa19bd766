"""The generated data set both sides of bench/peers load: memories about people, and queries.

Standard library only: the driver (the project's virtualenv) and the mem0 worker (the peers'
virtualenv) both import it and get the same memories, people and queries from the same seeds.

A memory is one sentence, `<who> <did> <what> <where> <when>.`, every slot drawn from its own
list. All words are lower case past the first, with no digits, months, weekdays, negations or
change words ("moved", "now", "no longer"): the service's consolidation rule
(core.lib.consolidation.claim_rule) reads those as values that changed, and would close an
older memory as superseded, which mem0 with `infer=False` never does. With them out, two
similar memories are kept side by side on both sides (or, on ours, the second is refused as a
near-duplicate when its cosine similarity reaches the dedupe threshold; the bench counts those).

A query is about one memory (its "expected" memory): the question form of its verb (a
different word), its object and its place, e.g. "who fixed the leaking kitchen tap near the
train station". It searches that memory's person only.
"""

import random
from dataclasses import dataclass

PEOPLE = 20
QUERIES = 200
SEED = 17

WHO = (
    "my sister", "my brother", "our neighbour", "my manager", "the landlord", "an old school friend",
    "my cousin", "the family doctor", "my grandmother", "the piano teacher", "my flatmate",
    "a colleague from accounting", "my uncle", "the babysitter", "my best friend", "the plumber",
    "my partner", "the swimming coach", "my niece", "a friend from the choir", "my godfather",
    "the bookshop owner", "my aunt", "the dog walker",
)  # fmt: skip
# (stored verb, the query's question form of it)
DID = (
    ("repaired", "who fixed"), ("bought", "who purchased"), ("recommended", "who suggested"),
    ("borrowed", "who took on loan"), ("sold", "who got rid of"), ("painted", "who decorated"),
    ("photographed", "who took pictures of"), ("lost", "who misplaced"), ("found", "who came across"),
    ("cleaned", "who scrubbed"), ("returned", "who brought back"), ("ordered", "who requested"),
    ("wrapped", "who packed up"), ("delivered", "who dropped off"), ("measured", "who sized up"),
    ("assembled", "who put together"), ("inspected", "who checked"), ("described", "who talked about"),
    ("hid", "who concealed"), ("donated", "who gave away"), ("polished", "who shined"),
    ("carried", "who hauled"), ("tested", "who tried out"), ("replaced", "who swapped out"),
)  # fmt: skip
WHAT = (
    "a vintage road bicycle", "the leaking kitchen tap", "a hardcover cookbook about dumplings",
    "the broken garden gate", "a pair of hiking boots", "the old upright piano", "a wooden rocking chair",
    "the family photo album", "a second hand sewing machine", "the cracked bathroom mirror",
    "a set of copper saucepans", "the spare car key", "a telescope for stargazing", "the blue winter coat",
    "a box of watercolour paints", "the noisy washing machine", "a handmade ceramic teapot",
    "the rusty lawn mower", "a bag of tulip bulbs", "the electric kettle", "a framed map of the coast",
    "the wobbly dining table", "a tent for camping trips", "the children's bunk beds",
    "a violin with a chipped scroll", "the heavy oak wardrobe", "a basket of knitting wool",
    "the cordless drill", "a jigsaw puzzle of a lighthouse", "the leather briefcase",
    "a pot of lavender", "the squeaky front door", "a stack of vinyl records", "the roof gutter",
    "a birthday cake shaped like a castle", "the fish tank filter", "a collection of silver spoons",
    "the attic ladder", "a kayak paddle", "the espresso machine", "a quilt made of patchwork",
    "the bathroom scales", "a chess set carved from walnut", "the garden hose", "a typewriter ribbon",
    "the baby's pram", "a poster of an opera", "the barbecue grill", "a lamp with a green shade",
    "the sourdough starter", "a skateboard with red wheels", "the dishwasher door",
    "a sketchbook full of birds", "the greenhouse window", "a crate of apple cider", "the ironing board",
    "a pair of ice skates", "the ceiling fan", "a bird feeder for the balcony", "the wedding album",
)  # fmt: skip
WHERE = (
    "near the train station", "at the farmers market", "in the garden shed", "behind the church",
    "at the community hall", "in the basement", "next to the bakery", "at the flea market",
    "in the hallway cupboard", "by the river path", "at the school fete", "in the car park",
    "at the sports centre", "in the spare bedroom", "outside the library", "at the allotment",
    "in the loft", "on the balcony", "at the charity shop", "by the harbour",
    "in the village square", "at the hardware store", "in the back yard", "at the swimming pool",
    "near the roundabout", "in the office kitchen", "at the garden centre", "under the stairs",
    "at the campsite", "in the workshop",
)  # fmt: skip
WHEN = (
    "last spring", "a few weeks ago", "over the holidays", "during the heatwave", "after the storm",
    "before the party", "early one morning", "at the weekend", "late last night", "during the move",
    "last autumn", "over the summer", "after work", "during the school run", "before the wedding",
    "in the rain", "last winter", "one lazy afternoon",
)  # fmt: skip


@dataclass(frozen=True)
class Memory:
    index: int
    person: int
    content: str


@dataclass(frozen=True)
class Query:
    index: int
    person: int
    text: str
    expected: int  # The index of the memory it is about.


def person_name(person: int) -> str:
    return f"person-{person:02d}"


def memories(size: int, *, people: int = PEOPLE, seed: int = SEED) -> list[Memory]:
    """`size` distinct memories, person `i % people` for the i-th; the same list for a seed."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[Memory] = []
    capacity = len(WHO) * len(DID) * len(WHAT) * len(WHERE) * len(WHEN)
    if size > capacity // 2:
        raise ValueError(f"at most {capacity // 2} memories")
    while len(out) < size:
        who, (did, _), what, where, when = (
            rng.choice(WHO),
            rng.choice(DID),
            rng.choice(WHAT),
            rng.choice(WHERE),
            rng.choice(WHEN),
        )
        content = f"{who[0].upper()}{who[1:]} {did} {what} {where} {when}."
        if content in seen:
            continue
        seen.add(content)
        out.append(Memory(index=len(out), person=len(out) % people, content=content))
    return out


def query_for(memory: Memory) -> str:
    verb = next(question for stored, question in DID if f" {stored} " in memory.content)
    what = next(item for item in WHAT if f" {item} " in memory.content)
    where = next(item for item in WHERE if f" {item} " in memory.content)
    return f"{verb} {what} {where}"


def queries(
    corpus: list[Memory], *, count: int = QUERIES, people: int = PEOPLE, seed: int = SEED
) -> list[Query]:
    """`count` queries, the same number per person, each about a memory drawn with `seed`."""
    rng = random.Random(seed + 1)
    by_person: dict[int, list[Memory]] = {}
    for memory in corpus:
        by_person.setdefault(memory.person, []).append(memory)
    out: list[Query] = []
    per_person = max(1, count // people)
    for person in range(people):
        for memory in rng.sample(by_person[person], min(per_person, len(by_person[person]))):
            out.append(Query(index=len(out), person=person, text=query_for(memory), expected=memory.index))
    return out[:count]


def extra_memories(corpus_size: int, count: int, *, people: int = PEOPLE, seed: int = SEED) -> list[Memory]:
    """`count` memories after the first `corpus_size` (measured adds into a loaded set)."""
    return memories(corpus_size + count, people=people, seed=seed)[corpus_size:]
