"""SCAN (Lake & Baroni, 2018) generated from its grammar: commands such as ``jump twice after walk left`` and the
action sequences they denote (``I_TURN_LEFT I_WALK I_JUMP I_JUMP``).

The grammar and its semantics, as in the paper's Table 1::

    C -> S and S | S after S | S          "x1 and x2" -> x1 x2;  "x1 after x2" -> x2 x1
    S -> V twice | V thrice | V           "x twice" -> x x;  "x thrice" -> x x x
    V -> D opposite L | D around L | D | U   (L: left or right)
    D -> U L | turn L                     "u left" -> LTURN u;  "turn left" -> LTURN
    U -> walk | look | run | jump

``opposite`` turns twice before the action, ``around`` does (turn, action) four times. The length of an example is
the number of its actions, as in SCAN's length split (train on at most 22 actions, test on 24 to 48).
"""

from __future__ import annotations

import random

PRIMITIVES = {"walk": "I_WALK", "look": "I_LOOK", "run": "I_RUN", "jump": "I_JUMP"}
TURNS = {"left": "I_TURN_LEFT", "right": "I_TURN_RIGHT"}
#: Every word of a command and every action, the task's symbols.
COMMAND_WORDS = (*PRIMITIVES, "turn", *TURNS, "opposite", "around", "twice", "thrice", "and", "after")
ACTIONS = (*PRIMITIVES.values(), *TURNS.values())
#: The most actions one command can denote: (around: 8) x thrice, twice over ("and").
MAX_ACTIONS = 48
#: The most words of one command: two phrases of four ("walk opposite left thrice") and their join.
MAX_WORDS = 9


def _reachable() -> frozenset[int]:
    """Every number of actions some command denotes: a phrase is 1, 2, 3, 4 or 8 actions (a primitive or "turn
    left"; "walk left" or "turn opposite left"; "walk opposite left"; "turn around left"; "walk around left"), once,
    twice or thrice; a command is one phrase or two."""
    phrase = {base * times for base in (1, 2, 3, 4, 8) for times in (1, 2, 3)}
    return frozenset(phrase | {a + b for a in phrase for b in phrase})


#: The lengths a SCAN example can have (23, 29, 31, … none denotes).
REACHABLE = _reachable()


def _direction(rng: random.Random) -> tuple[list[str], list[str]]:
    """A D or V phrase: its words and its actions."""
    side = rng.choice(list(TURNS))
    verb = rng.choice([*PRIMITIVES, "turn"])
    unit = [] if verb == "turn" else [PRIMITIVES[verb]]
    turn = [TURNS[side]]
    form = rng.choice(("plain", "opposite", "around"))
    if form == "plain":
        return [verb, side], turn + unit
    if form == "opposite":
        return [verb, "opposite", side], turn + turn + unit
    return [verb, "around", side], (turn + unit) * 4


def _phrase(rng: random.Random) -> tuple[list[str], list[str]]:
    """An S phrase: a primitive or a direction phrase, once, twice or thrice."""
    if rng.random() < 0.25:
        verb = rng.choice(list(PRIMITIVES))
        words, actions = [verb], [PRIMITIVES[verb]]
    else:
        words, actions = _direction(rng)
    times = rng.choice((1, 2, 3))
    return words + ({2: ["twice"], 3: ["thrice"]}.get(times, [])), actions * times


def command(rng: random.Random) -> tuple[list[str], list[str]]:
    """One command drawn from the grammar, and its actions."""
    first = _phrase(rng)
    join = rng.choice(("none", "and", "after"))
    if join == "none":
        return first
    second = _phrase(rng)
    if join == "and":
        return first[0] + ["and"] + second[0], first[1] + second[1]
    return first[0] + ["after"] + second[0], second[1] + first[1]


def interpret(words: list[str]) -> list[str]:
    """The actions a command denotes, by the grammar's semantics (independent of :func:`command`, for tests)."""
    for join in ("and", "after"):
        if join in words:
            k = words.index(join)
            left, right = interpret(words[:k]), interpret(words[k + 1 :])
            return left + right if join == "and" else right + left
    times = {"twice": 2, "thrice": 3}.get(words[-1], 1)
    core = words[:-1] if times > 1 else words
    if len(core) == 1:
        return [PRIMITIVES[core[0]]] * times
    verb, side = core[0], core[-1]
    unit = [] if verb == "turn" else [PRIMITIVES[verb]]
    turn = [TURNS[side]]
    if len(core) == 2:
        actions = turn + unit
    elif core[1] == "opposite":
        actions = turn + turn + unit
    else:
        actions = (turn + unit) * 4
    return actions * times
