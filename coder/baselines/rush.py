"""Focus-fire rush: every NPC walks straight at the bot and strikes whenever its melee lands.

Five NPCs in melee deal up to 150 HP/s against the bot's 18.75, so closing in together wins
against a bot that fights (docs/arena.md, "A note on balance").
"""


def policy(obs):
    if obs.bot.can_attack:
        return MELEE
    return MOVE_TO_BOT
