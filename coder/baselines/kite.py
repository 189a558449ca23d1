"""Kite with orbs: keep 6-11 u from the bot and fire orbs from there.

Inside NEAR an NPC backs off, beyond FAR it closes in. In the band it fires with probability
FIRE (the orb cooldown is not observed, and a shot on cooldown wastes the tick) and otherwise
steers for the band's middle, so a fleeing bot does not walk out of range between shots.
"""

NEAR = 6.0
FAR = 11.0
FIRE = 0.8


def policy(obs):
    d = obs.bot.distance
    fire = random() < FIRE
    if d < NEAR:
        return RETREAT
    if d > FAR:
        return MOVE_TO_BOT
    if fire:
        return RANGED
    return MOVE_TO_BOT if d > (NEAR + FAR) / 2 else RETREAT
