"""Surround, then strike: each NPC takes its own slot round the bot, then closes in and melees.

Slots are 72 degrees apart (five round a circle), centred on the squad's side of the bot and
assigned by obs.index. An NPC closes to APPROACH u, strafes round the bot until it is within
TOLERANCE of its slot, then walks in. A strike that lands is never passed up.
"""

APPROACH = 8.0
TOLERANCE = 0.35  # radians


def policy(obs):
    if obs.bot.can_attack:
        return MELEE
    # The squad's centroid, this NPC included (the dead lie where they fell).
    cx = obs.me.x
    cz = obs.me.z
    for ally in obs.allies:
        cx += ally.x
        cz += ally.z
    side = bearing(obs.bot, point(cx / 5, cz / 5))
    slot = side + radians(72 * (obs.index - 2))
    error = angle_diff(slot, bearing(obs.bot, obs.me))
    if obs.bot.distance <= APPROACH and abs(error) > TOLERANCE:
        if error > 0:
            return STRAFE_RIGHT  # counter-clockwise: the bearing from the bot grows
        return STRAFE_LEFT
    return MOVE_TO_BOT
