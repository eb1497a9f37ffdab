"""A controlled retrieval world whose correct reversed instructions are known: the method check's data.

Owns the generator of one world (topics, passages with attributes, instructions) and its two
outputs: Promptriever-format seed rows and a FollowIR-format eval set on disjoint topics, plus the
metadata (`world.json`) that says which attribute an instruction constrains and which value every
passage has. It also owns the wording of instructions, so the reference engine
(`tests/helpers/reference_engine.py`, plugged in as `engine: plugin`) writes the correct reversal from this module alone. It
does not know about engines, training or files beyond writing its own folder.

The prose is template prose written for this project (no public-domain corpus was available
offline): each passage reports a study on one topic ("how does <intervention> affect <outcome>"),
and states four attributes a reader can check from the text — place, population, method and time.

    topic    how does daily walking affect sleep quality
    passage  "A cohort study in Lisbon during the 1990s followed older adults to see how daily
              walking relates to sleep quality. ..."
    seed     instruction "I only want research carried out in Lisbon; ..." (attribute place),
             positive: place = Lisbon; instruction negatives: same topic, place != Lisbon
    reversal N* (first instruction negative) has place = Kyoto -> "Focus on evidence gathered in
             Kyoto and set aside other places." (another wording family, so it is no near copy)

Like Promptriever's data, where the positive is the passage originally retrieved for the query and
the instruction negatives were written afterwards, a seed's positive uses the query's own wording
while its instruction negatives paraphrase it (`WorldConfig.shortcut`: the share of seeds built so).
A retriever can then fit those instruct rows by wording alone; a dual view, whose positive is a
paraphrasing negative, cannot be fit that way. In the eval set wording is drawn at random, so it
carries no signal there. The default share is half: with every seed built so, a dual view whose
instruction was swapped for another seed's still pays (it breaks the wording cue by itself) and
the check could not tell instruction use from cue removal; with none, Ins-orig has nothing that a
dual view would fix (DEVELOPERS.md, "The method check", has the measurements).

The eval set is FollowIR-shaped: the original instruction accepts any value of the attribute, the
changed one adds a sentence, worded unlike any training instruction, that accepts one value, so the topic's passages with another value turn
from relevant to not relevant. Everything is a pure function of `WorldConfig` (seed included).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

# (wording in the query, a paraphrase used by passages that do not copy the query)
INTERVENTIONS = (
    ("daily walking", "walking every day"), ("intermittent fasting", "time-restricted eating"),
    ("green tea", "drinking green tea"), ("mindfulness meditation", "mindful breathing practice"),
    ("cold water swimming", "open-water winter bathing"), ("a vegetarian diet", "meat-free eating"),
    ("screen time", "hours spent on screens"), ("music lessons", "learning an instrument"),
    ("urban gardening", "growing food in cities"), ("remote work", "working from home"),
    ("strength training", "lifting weights"), ("a daily nap", "a short afternoon sleep"),
)
OUTCOMES = (
    ("sleep quality", "how well people sleep"), ("blood pressure", "arterial pressure"),
    ("memory", "recall of recent events"), ("anxiety", "feelings of worry"),
    ("body weight", "weight gain or loss"), ("reading skills", "literacy"),
    ("heart health", "cardiovascular fitness"), ("loneliness", "social isolation"),
    ("productivity", "output at work"), ("bone density", "skeletal strength"),
    ("mood", "emotional wellbeing"), ("attention span", "ability to concentrate"),
)
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "place": ("Lisbon", "Kyoto", "Nairobi", "Toronto", "Santiago", "Helsinki"),
    "population": ("children", "older adults", "pregnant women", "office workers", "athletes", "farmers"),
    "method": ("randomised trial", "survey", "cohort study", "case series", "laboratory experiment", "interview study"),
    "time": ("the 1970s", "the 1980s", "the 1990s", "the 2000s", "the 2010s", "the 2020s"),
}

# The seeds' (and the eval set's) wording of "only this value" per attribute ...
ORIGINAL = {
    "place": "I only want research carried out in {v}; findings from any other country or city are of no use to me.",
    "population": "I am only interested in results about {v}; work on any other group of people does not help.",
    "method": "Please limit this to evidence from {a_v}; other kinds of research design are not what I need.",
    "time": "I only care about work done during {v}; anything from another period is not relevant.",
}
# ... and the reversal's wording: another family, so a reversal is never a near copy of its original.
REVERSED = {
    "place": "Focus on evidence gathered in {v} and set aside other places.",
    "population": "Look for what was observed among {v} and leave out every other group.",
    "method": "Stick to reports based on {a_v} and skip other designs.",
    "time": "Keep to studies from {v} and ignore other decades.",
}
# The eval set's changed instruction, in a third family that neither the seeds nor the reversals
# use: a retriever is scored on instructions written unlike anything it trained on, so neither
# mixture is favoured by having trained on the eval's wording.
HELD_OUT = {
    "place": "Only studies conducted in {v} count here.",
    "population": "Only studies whose participants were {v} count here.",
    "method": "Only findings from {a_v} count here.",
    "time": "Only research from {v} counts here.",
}
# The eval set's original instruction: any value of the attribute is fine.
OPEN = "I want published findings on this question; work from any {a} is useful as long as it reports on it."
OPEN_NOUN = {"place": "country or city", "population": "group of people", "method": "research design", "time": "period"}

OPENINGS = (
    "{A_method} in {place} during {time} followed {population} to see how {x} relates to {y}.",
    "During {time}, researchers in {place} ran {a_method} with {population} on {x} and {y}.",
    "This {method} from {place} looked at {population} in {time} and asked what {x} does to {y}.",
)
FINDINGS = (
    "The authors report a modest improvement after six months.",
    "They found no clear difference between the groups.",
    "Results were mixed and depended on how often people took part.",
    "The effect was strongest in the first few weeks and then faded.",
    "Participants who kept going longest showed the largest change.",
)


@dataclass(frozen=True)
class WorldConfig:
    """What one world holds. Every field is part of the world's identity."""

    seed: int = 0
    seed_topics: int = 96  # topics with one instruct row (and its non-instruct twin) each
    eval_topics: int = 40  # disjoint from the seed topics
    instruction_negatives: int = 2  # per seed, on topic, each with another value of the attribute
    negatives: int = 4  # per seed, passages of other seed topics
    eval_passages: int = 6  # on-topic passages per eval query (half keep the value, half lose relevance)
    eval_distractors: int = 6  # off-topic candidates per eval query
    shortcut: float = 0.5  # share of seeds whose positive alone copies the query's wording (see the module doc)

    def __post_init__(self):
        topics = len(INTERVENTIONS) * len(OUTCOMES)
        if self.seed_topics + self.eval_topics > topics:
            raise ValueError(f"a world has {topics} topics; {self.seed_topics} + {self.eval_topics} asked")
        if not 1 <= self.instruction_negatives < min(len(v) for v in ATTRIBUTES.values()):
            raise ValueError("instruction_negatives must be at least 1 and leave a value for the positive")
        if self.negatives >= self.seed_topics:
            raise ValueError(f"negatives come from other seed topics: {self.negatives} need more than {self.seed_topics} topics")
        if self.eval_passages < 2:
            raise ValueError("eval_passages must be at least 2 (one kept, one changed)")
        if not 0 <= self.shortcut <= 1:
            raise ValueError("shortcut is a share in [0, 1]")


@dataclass(frozen=True)
class Passage:
    doc_id: str
    title: str
    text: str
    attributes: dict[str, str] = field(default_factory=dict)

    def promptriever(self) -> dict:
        return {"docid": self.doc_id, "title": self.title, "text": self.text}


def article(noun: str) -> str:
    """'a survey', 'an interview study'."""
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def original_instruction(attribute: str, value: str) -> str:
    return ORIGINAL[attribute].format(v=value, a_v=article(value))


def held_out_instruction(attribute: str, value: str) -> str:
    return HELD_OUT[attribute].format(v=value, a_v=article(value))


def reversed_instruction(attribute: str, value: str) -> str:
    """The correct instruction under which a passage with `attribute = value` is the answer."""
    return REVERSED[attribute].format(v=value, a_v=article(value))


def satisfies(attributes: Mapping[str, str], attribute: str, value: str) -> bool:
    return attributes[attribute] == value


class _Writer:
    def __init__(self, rng: random.Random):
        self.rng, self.count = rng, 0

    def passage(self, prefix: str, topic: tuple[int, int], attributes: dict[str, str], verbatim: bool) -> Passage:
        self.count += 1
        x = INTERVENTIONS[topic[0]][0 if verbatim else 1]
        y = OUTCOMES[topic[1]][0 if verbatim else 1]
        a_method = article(attributes["method"])
        opening = self.rng.choice(OPENINGS).format(x=x, y=y, a_method=a_method, A_method=a_method.capitalize(), **attributes)
        text = " ".join([opening, self.rng.choice(FINDINGS)])  # short: the check trains on 2 CPU cores
        title = f"{x[0].upper()}{x[1:]} and {y}: {article(attributes['method'])} in {attributes['place']}"
        return Passage(f"{prefix}{self.count:05d}", title, text, dict(attributes))

    def attributes(self, **fixed: str) -> dict[str, str]:
        return {a: fixed.get(a) or self.rng.choice(values) for a, values in ATTRIBUTES.items()}


def query_text(topic: tuple[int, int]) -> str:
    return f"how does {INTERVENTIONS[topic[0]][0]} affect {OUTCOMES[topic[1]][0]}"


@dataclass
class World:
    config: WorldConfig
    seeds: list[dict]  # Promptriever rows: instruct row then its twin, per seed topic
    corpus: list[dict]  # eval corpus rows (_id, title, text)
    queries: list[dict]  # eval queries (_id, text, instruction_og, instruction_changed)
    qrels_og: list[dict]
    qrels_changed: list[dict]
    top_ranked: list[dict]
    metadata: dict  # world.json: config, per seed and per eval query what the instruction constrains

    def write(self, folder: str | Path) -> dict[str, str]:
        """seeds.jsonl, eval/ (FollowIR original layout) and world.json under `folder`; their paths."""
        root = Path(folder)
        (root / "eval").mkdir(parents=True, exist_ok=True)
        files = {"seeds": root / "seeds.jsonl", "eval_set": root / "eval", "world": root / "world.json"}
        _jsonl(files["seeds"], self.seeds)
        for name in ("corpus", "queries", "qrels_og", "qrels_changed", "top_ranked"):
            _jsonl(root / "eval" / f"{name}.jsonl", getattr(self, name))
        files["world"].write_text(json.dumps(self.metadata, indent=1, ensure_ascii=False), encoding="utf-8")
        return {k: str(v) for k, v in files.items()}


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def build_world(cfg: WorldConfig = WorldConfig()) -> World:
    """The world of `cfg`: a pure function of it."""
    rng = random.Random(cfg.seed)
    topics = [(i, j) for i in range(len(INTERVENTIONS)) for j in range(len(OUTCOMES))]
    rng.shuffle(topics)
    seed_topics, eval_topics = topics[: cfg.seed_topics], topics[cfg.seed_topics : cfg.seed_topics + cfg.eval_topics]
    writer = _Writer(rng)
    seeds, seed_meta = _seeds(seed_topics, cfg, rng, writer)
    eval_parts = _eval_set(eval_topics, cfg, rng, writer)
    metadata = {"contract": "World/1", "config": asdict(cfg), "seeds": seed_meta, "eval": eval_parts.pop("meta")}
    return World(config=cfg, seeds=seeds, metadata=metadata, **eval_parts)


def _seeds(topics, cfg: WorldConfig, rng: random.Random, writer: _Writer) -> tuple[list[dict], dict]:
    drafts = []
    for n, topic in enumerate(topics):
        attribute = rng.choice(sorted(ATTRIBUTES))
        values = rng.sample(ATTRIBUTES[attribute], 1 + cfg.instruction_negatives)  # distinct: [wanted, others...]
        shortcut = rng.random() < cfg.shortcut
        positive = writer.passage("w", topic, writer.attributes(**{attribute: values[0]}), verbatim=True)
        inegs = [writer.passage("w", topic, writer.attributes(**{attribute: v}), verbatim=not shortcut) for v in values[1:]]
        drafts.append((f"w{n:04d}", topic, attribute, values[0], positive, inegs))
    rows, meta = [], {}
    for qid, topic, attribute, value, positive, inegs in drafts:
        others = [d for d in drafts if d[0] != qid]
        negatives = [rng.choice([d[4]] + d[5]) for d in rng.sample(others, cfg.negatives)]  # other topics
        query, instruction = query_text(topic), original_instruction(attribute, value)
        common = {"query_id": qid, "only_query": query, "positive_passages": [positive.promptriever()],
                  "negative_passages": [p.promptriever() for p in negatives]}
        passages = {p.doc_id: p.attributes for p in [positive, *inegs, *negatives]}
        world = {"query": query, "attribute": attribute, "value": value, "passages": passages}
        rows.append({**common, "query": f"{query} {instruction}", "only_instruction": instruction, "has_instruction": True,
                     "new_negatives": [p.promptriever() for p in inegs], "world": world})
        rows.append({**common, "query": query, "only_instruction": "", "has_instruction": False, "new_negatives": []})
        meta[qid] = world
    return rows, meta


def _eval_set(topics, cfg: WorldConfig, rng: random.Random, writer: _Writer) -> dict:
    corpus, queries, og, changed, top, meta = [], [], [], [], [], {}
    on_topic: dict[str, list[Passage]] = {}
    for n, topic in enumerate(topics):
        qid = f"q{n:04d}"
        attribute = rng.choice(sorted(ATTRIBUTES))
        value, *others = rng.sample(ATTRIBUTES[attribute], len(ATTRIBUTES[attribute]))
        kept = cfg.eval_passages // 2
        wanted = [value] * kept + [rng.choice(others) for _ in range(cfg.eval_passages - kept)]
        on_topic[qid] = [writer.passage("e", topic, writer.attributes(**{attribute: v}), verbatim=rng.random() < 0.5)
                         for v in wanted]
        instruction_og = OPEN.format(a=OPEN_NOUN[attribute])
        queries.append({"_id": qid, "text": query_text(topic), "instruction_og": instruction_og,
                        "instruction_changed": f"{instruction_og} {held_out_instruction(attribute, value)}"})
        meta[qid] = {"attribute": attribute, "value": value,
                     "passages": {p.doc_id: p.attributes for p in on_topic[qid]}}
    for qid, passages in on_topic.items():
        corpus.extend({"_id": p.doc_id, "title": p.title, "text": p.text} for p in passages)
        value, attribute = meta[qid]["value"], meta[qid]["attribute"]
        distractors = [rng.choice(v) for k, v in sorted(on_topic.items()) for _ in [0] if k != qid]
        candidates = passages + rng.sample(distractors, min(cfg.eval_distractors, len(distractors)))
        for p in candidates:
            relevant_og = p in passages
            og.append({"query-id": qid, "corpus-id": p.doc_id, "score": int(relevant_og)})
            changed.append({"query-id": qid, "corpus-id": p.doc_id,
                            "score": int(relevant_og and satisfies(p.attributes, attribute, value))})
        top.extend({"qid": qid, "pid": p.doc_id} for p in sorted(candidates, key=lambda p: p.doc_id))
    return {"corpus": corpus, "queries": queries, "qrels_og": og, "qrels_changed": changed, "top_ranked": top, "meta": meta}


# --- the reference answer (what the reference engine writes) ------------------------------------------


def read_metadata(path: str | Path) -> dict:
    """world.json as `World.write` wrote it; a clear error for anything else."""
    try:
        meta = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable world.json ({e})") from None
    if not isinstance(meta, dict) or meta.get("contract") != "World/1":
        raise ValueError(f"{path}: not a world.json (contract World/1)")
    return meta


def reference_instruction(meta: Mapping, query_id: str, target_doc_id: str, query: str | None = None) -> str:
    """The correct reversed instruction for seed `query_id` with N* = `target_doc_id`: it asks for
    N*'s value of the attribute the seed's instruction constrains. With `query`, the world's seed
    must have that query (ids alone may come from another world). KeyError names what is unknown."""
    seeds = meta["seeds"]
    if query_id not in seeds or (query is not None and seeds[query_id]["query"] != query):
        raise KeyError(f"seed {query_id}" + (f" with query {query!r}" if query is not None else ""))
    seed = seeds[query_id]
    if target_doc_id not in seed["passages"]:
        raise KeyError(f"passage {target_doc_id} for seed {query_id}")
    attribute = seed["attribute"]
    return reversed_instruction(attribute, seed["passages"][target_doc_id][attribute])


def reference_answer(meta: Mapping, query_id: str, target_doc_id: str, query: str | None = None) -> str:
    """`reference_instruction` in the answer block the parser reads."""
    return f"<answer><new_instruction>{reference_instruction(meta, query_id, target_doc_id, query)}</new_instruction></answer>"
