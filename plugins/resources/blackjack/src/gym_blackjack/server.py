"""One hand of simplified blackjack (the environments spec, §19), Gymnasium-style.

The rules are the spec's: an infinite deck (each card uniform over 2-10, J, Q, K, A, drawn with
replacement), J/Q/K worth 10, an ace 11 reduced to 1 while the hand is over 21, no natural, no
split, no double. Hit: bust (over 21) ends the hand with -1, else the hand goes on with reward 0.
Stand: the dealer draws while under 17; +1 if the dealer busts or the player's total is higher,
0 on a tie, -1 otherwise.

Unlike the reference, a hand is reproducible: the cards come from ``random.Random("blackjack:<seed>")``
(a string seed: the same stream on every platform and Python 3.x), one ``randrange(13)`` per card
into ``RANKS``, in the order the cards are drawn: player, dealer, player, dealer (the first four,
dealt alternately as at a table), then the player's hits, then the dealer's draws. A row without
``seed`` gets a fresh one from the system's randomness, reported in the reset ``info`` so that the
hand can be replayed.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from gym_core.gymnasium_env import GymnasiumEnvironment, Reset, Step
from gym_core.schemas import SeedSessionRequest

__all__ = ["BlackjackServer", "BlackjackTask", "Hand", "RANKS", "hand_value", "deal"]

RANKS = ("2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K", "A")
ACTION = re.compile(r"<action>\s*(hit|stand)\s*</action>", re.IGNORECASE)
INSTRUCTION = "Reply with <action>hit</action> to take another card or <action>stand</action> to stop."


class BlackjackTask(SeedSessionRequest, kw_only=True):
    seed: int | None = None


def card_value(rank: str) -> int:
    return 11 if rank == "A" else 10 if rank in ("J", "Q", "K") else int(rank)


def hand_value(cards: list[str]) -> int:
    """The hand's total: aces count 11, each reduced to 1 while the total is over 21."""
    total = sum(card_value(c) for c in cards)
    aces = cards.count("A")
    while total > 21 and aces:
        total -= 10
        aces -= 1
    return total


@dataclass
class Hand:
    """One hand in play: the seed, the card stream, and both hands."""

    seed: int
    rng: random.Random
    player: list[str] = field(default_factory=list)
    dealer: list[str] = field(default_factory=list)

    def draw(self) -> str:
        return RANKS[self.rng.randrange(len(RANKS))]


def deal(seed: int) -> Hand:
    """The hand of ``seed``, its first four cards dealt (player, dealer, player, dealer)."""
    hand = Hand(seed, random.Random(f"blackjack:{seed}"))
    for _ in range(2):
        hand.player.append(hand.draw())
        hand.dealer.append(hand.draw())
    return hand


def observation(hand: Hand) -> str:
    return (
        f"Your hand: [{', '.join(hand.player)}] = {hand_value(hand.player)}\n"
        f"Dealer shows: {hand.dealer[0]}\n{INSTRUCTION}"
    )


class BlackjackServer(GymnasiumEnvironment):
    actions = ("hit", "stand")
    reward_range = (-1.0, 1.0)

    def reset(self, task: BlackjackTask) -> Reset:
        seed = task.seed if task.seed is not None else random.SystemRandom().randrange(2**32)
        hand = deal(seed)
        return Reset(hand, observation(hand), {"seed": seed})

    def parse_action(self, text: str, state: Hand) -> str:
        """The first ``<action>hit|stand</action>`` of the text; none: stand (the spec's default)."""
        match = ACTION.search(text)
        return match.group(1).lower() if match else "stand"

    def step(self, state: Hand, action: str) -> Step:
        hand = state
        if action == "hit":
            hand.player.append(hand.draw())
            value = hand_value(hand.player)
            if value > 21:
                return Step(None, -1.0, True, False, {"result": "bust", "player": list(hand.player), "value": value})
            return Step(observation(hand), 0.0, False, False, {})
        while hand_value(hand.dealer) < 17:
            hand.dealer.append(hand.draw())
        player, dealer = hand_value(hand.player), hand_value(hand.dealer)
        if dealer > 21 or player > dealer:
            result, reward = "win", 1.0
        elif player == dealer:
            result, reward = "draw", 0.0
        else:
            result, reward = "loss", -1.0
        info: dict[str, Any] = {
            "result": result,
            "player": list(hand.player),
            "player_value": player,
            "dealer": list(hand.dealer),
            "dealer_value": dealer,
        }
        return Step(None, reward, True, False, info)
