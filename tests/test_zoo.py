"""The policy zoo: every shipped directory has a complete card, every old name loads through one path,
and a card never changes the checksum that stored protocol cells are fingerprinted with."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from jaxarena import zoo, zoo_cli
from jaxarena.algorithms.checkpoint import load_policy, read_config, resolve_path, shipped_policies
from jaxarena.protocol.policies import policy_env_id, policy_shaping, resolve_policy
from jaxarena.zoo import directory_checksum
from jaxarena.zoo_cards import CARD_FILE, FIELDS, NOT_MEASURED, CardError, read_card, shipped_directories

# directory_checksum of every shipped squad before the cards existed (computed on the commit before them):
# the sha256 every stored protocol cell of these squads carries in its fingerprint.
CHECKSUMS_BEFORE_CARDS = {
    "A": "98c9ba310a4c6ee92819aa1d36168cca1ac43900d0aced9937f2fd8f801441fc",
    "A-raid": "5a8632b8d2455835a7289d3428de58db5c0a290e49d550fa0674a6430f79e038",
    "B": "9ea714e19a15a1f7da7bbf0d7514e6e531b4a8aacda860e4f153b1dbca935a79",
    "B-experts": "2c4ecb599efd1e5156abb186c79386e573cb50ad7bd527471a45f3eabad910a4",
    "B-obey-raid": "b56d2210d97744b29d21bab4aeca4d713359caea326081f71332b177be14d2d7",
    "B-paper": "73e9f1a398b0c7766a284a9ab44a6be94cd188988f3438aad554f6e17640fc3f",
    "B-raid": "7dd42efb61a902732d2e5eefb75c4da6f1a6cd501a0252ac9b1314e593489f68",
    "A-brute": "8df1d5f9f71acba4d2a1461814659dcf3b94bd71e2a017fbccc9cabc611593e5",
    "B-obey": "a0d6ddeb6c53e342e925feea5cd51def112c6855ff30a2a3ef1c955094b25afd",
    "B-obey-brute": "7c1ba32f1efc2d5e7d234afab5fbda302ae298ea5c5890687477cad7794a9db6",
    "B-sides-raid": "cddf3a98da871bc14a44cf69b69b011737ee8f94de9318343d57838fb4e930b1",
    "A-unity": "c2a9ee5b09398de46030ee042f0825c73c112602d5a8ba1ea0f8d91d5ed1e9f4",
    "B-unity": "2f77444376cad2ae81d8a466119c0d7a00f59ec7d9ffc348a382f695d9c50dcd",
    "A-gru-unity": "3312228aeb85fe9c238ef313e463b5df572a298bc36a4fc731054f986aacc524",
}
SQUADS = sorted(CHECKSUMS_BEFORE_CARDS)
SELECTORS = ["C", "C-all-tags", "C-nodeduction", "C-raid", "C-scripted"]


def test_every_shipped_directory_has_a_complete_card():
    shipped = shipped_directories()
    assert sorted(shipped["squad"]) == SQUADS and sorted(shipped["selector"]) == SELECTORS
    assert {"smollm2-raid-sft", "smollm2-raid-grpo"} <= set(shipped["adapter"])
    # GRPO continued the SFT adapter: its card says so, and that it learned in play.
    grpo = read_card(shipped["adapter"]["smollm2-raid-grpo"])
    assert grpo.init_from == "smollm2-raid-sft" and "GRPO steps on states of its own play" in grpo.note
    # The glance LLM's adapter reads as one that plays B-obey-raid, with its held-out win rates.
    glance = read_card(shipped["adapter"]["smollm2-raid-glance"])
    assert (glance.plays, glance.scenario, glance.recipe) == ("B-obey-raid", "raid", "glance")
    assert glance.rate("aggressive").win_pct > 0 and "0.2 s" in glance.summary
    for kind, directories in shipped.items():
        for name, directory in directories.items():
            card = read_card(directory)
            assert (card.name, card.kind) == (name, kind)
            assert card.status in zoo.STATUSES and card.summary and card.recipe and card.command and card.note
            if kind != "adapter":
                raw = json.loads((directory / CARD_FILE).read_text())
                assert set(raw) == set(FIELDS), name
                assert raw["win_rates"] == NOT_MEASURED or card.measured
            if card.measured:
                assert sorted(r.bot for r in card.win_rates) == ["aggressive", "balanced", "evasive"], name
                for r in card.win_rates:
                    assert 0 <= r.ci95[0] <= r.win_pct <= r.ci95[1] <= 100 and r.n > 0, (name, r)


def test_squad_cards_agree_with_the_config_they_describe():
    for name, directory in shipped_policies().items():
        card, config = read_card(directory), read_config(directory)
        assert (card.env_id, card.scenario, card.steps) == (config.env_id, config.scenario, config.total_timesteps)
        # A run warm-started from a scratch directory names the shipped policy that directory held.
        assert card.init_from == config.init_from or config.init_from not in shipped_policies(), name
        assert card.init_from is None or card.init_from in shipped_policies(), name
    for directory in shipped_directories()["selector"].values():
        squad = json.loads((directory / "config.json").read_text())["squad"]
        assert (
            read_card(directory).plays == squad
            and read_card(directory).env_id == read_card(shipped_policies()[squad]).env_id
        )


def test_the_archive_holds_exactly_what_is_not_recommended():
    for kind in ("squad", "selector"):
        for name, directory in shipped_directories()[kind].items():
            archived = directory.parent.name == "archive"
            assert archived == (read_card(directory).status != "recommended"), name


def test_a_card_leaves_the_checksum_unchanged(tmp_path):
    for name, directory in shipped_policies().items():
        assert directory_checksum(directory) == CHECKSUMS_BEFORE_CARDS[name], name
    copy = shutil.copytree(shipped_policies()["A"], tmp_path / "A")
    with_card = directory_checksum(copy)
    (copy / CARD_FILE).unlink()
    assert directory_checksum(copy) == with_card == CHECKSUMS_BEFORE_CARDS["A"]
    (copy / CARD_FILE).write_text("{}")  # any card, even a wrong one
    assert directory_checksum(copy) == with_card
    # ... while any other file still counts, at the top level or below it.
    (copy / "notes.txt").write_text("x")
    assert directory_checksum(copy) != with_card
    (copy / "notes.txt").unlink()
    (copy / "checkpoints" / CARD_FILE).write_text("{}")
    assert directory_checksum(copy) != with_card


def test_list_filters_by_kind_and_status():
    assert [c.name for c in zoo.list(kind="selector")] == SELECTORS
    recommended = {c.name for c in zoo.list(status="recommended")}
    assert {"A", "B", "B-paper", "A-raid", "B-obey-raid", "C"} <= recommended
    assert not recommended & {"A-brute", "B-obey", "C-scripted"}
    assert zoo.list("squad", "ablation") == []
    assert [c.name for c in zoo.list("selector", "ablation")] == ["C-all-tags", "C-nodeduction", "C-scripted"]
    with pytest.raises(ValueError, match="choose from squad, selector, adapter"):
        zoo.list(kind="squads")


def test_table_has_a_row_per_entry_and_drops_the_columns_a_filter_fixes():
    full = zoo.table().splitlines()
    assert len(full) == 2 + len(zoo.list())
    assert full[0].startswith("| name | kind | status |")
    recommended = zoo.table(status="recommended").splitlines()
    assert recommended[0].startswith("| name | kind | arena") and len(recommended) == 2 + len(
        zoo.list(status="recommended")
    )
    a_raid = next(line for line in zoo.table(kind="squad", ci=True).splitlines() if line.startswith("| `A-raid`"))
    assert "55.0 [50.6, 59.3] / 73.2 [69.2, 76.9] / 24.6 [21.0, 28.6] (n 500)" in a_raid


@pytest.mark.parametrize("name", SQUADS)
def test_every_old_name_loads_as_a_policy_that_matches_the_old_readers(name):
    policy = zoo.load(name)
    fn, _ = load_policy(name)
    # What the protocol read off the bare function before the zoo existed.
    assert policy.env_id == policy_env_id(fn) == getattr(fn, "env_id", "Arena-v0")
    assert policy.shaping == policy_shaping(fn) and policy_shaping(policy) == policy_shaping(fn)
    assert policy_env_id(policy) == policy.env_id and policy.scenario == fn.scenario
    assert policy.checksum == "sha256:" + CHECKSUMS_BEFORE_CARDS[name]
    assert (policy.card.name, policy.card.env_id, policy.card.scenario) == (name, policy.env_id, policy.scenario)
    _, _, checksum, source = resolve_policy(name)
    assert (checksum, source) == (policy.checksum, policy.source)
    # A packaged policy is named by a path that loads it on any machine, never this checkout's.
    assert not Path(policy.source).is_absolute() and policy.source.startswith("pretrained/")
    assert resolve_path(policy.source) == shipped_policies()[name]


def test_a_run_directory_loads_without_a_card(tmp_path):
    run = shutil.copytree(shipped_policies()["A"], tmp_path / "run")
    (run / CARD_FILE).unlink()
    policy = zoo.load(str(run))
    assert policy.card is None and policy.source == str(run) and policy.checksum == zoo.load("A").checksum


def test_scripted_and_white_box_specs():
    rush = zoo.load("scripted:rush")
    assert (rush.params, rush.env_id, rush.scenario, rush.card) == (None, "Arena-v0", "paper", None)
    assert rush.checksum == "sha256:" + hashlib.sha256(b"scripted:rush").hexdigest()
    assert rush.shaping == {"shaping_weight": 1.0, "shaping_recipe": 0}
    kite = zoo.load("coder:kite")
    assert kite.source == "coder/baselines/kite.py" and kite.params is None
    assert resolve_policy("coder:kite")[2] == kite.checksum


def test_unknown_specs_name_the_choices():
    with pytest.raises(ValueError, match="no squad policy 'A-raids'.*A-raid, A-unity, B.*scripted:NAME.*coder:NAME"):
        zoo.load("A-raids")
    with pytest.raises(FileNotFoundError):  # what callers caught before the zoo
        resolve_policy("no/such/run")
    with pytest.raises(ValueError, match="'C' is a shipped selector, not a squad"):
        zoo.load("C")
    with pytest.raises(ValueError, match="unknown scripted policy 'nope'; choose from"):
        zoo.load("scripted:nope")
    with pytest.raises(ValueError, match="unknown white-box baseline 'nope'; choose from"):
        zoo.load("coder:nope")


def test_archived_selectors_load_by_their_old_names():
    from jaxarena.selector.train import load_selector, selector_directory

    for name in ("C-all-tags", "C-nodeduction", "C-scripted"):
        assert selector_directory(name).parent.name == "archive"
        config, _, params = load_selector(name)
        assert config.squad == "B-experts" and params
    assert selector_directory("C").parent.name == "pretrained"


def test_an_incomplete_card_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "X").mkdir()
    (tmp_path / "X" / CARD_FILE).write_text(json.dumps({"kind": "squad", "name": "X"}))
    with pytest.raises(CardError, match="missing format, status, summary"):
        read_card(tmp_path / "X")
    monkeypatch.setattr("jaxarena.zoo_cards.shipped_directories", lambda: {"squad": {"X": tmp_path / "X"}})
    assert zoo_cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("jaxarena-zoo: error: ") and "missing" in err


def test_the_command_prints_the_table_and_the_cards(capsys):
    assert zoo_cli.main(["--status", "recommended"]) == 0
    assert capsys.readouterr().out.strip() == zoo.table(status="recommended")
    assert zoo_cli.main(["--kind", "selector", "--json"]) == 0
    cards = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in cards] == SELECTORS and cards[0]["win_rates"][0]["bot"] == "aggressive"
    # One entry by name: its whole card, every win rate with its interval; an unknown name lists the names.
    assert zoo_cli.main(["A-raid"]) == 0
    out = capsys.readouterr().out
    card = zoo.list(kind="squad")[[c.name for c in zoo.list(kind="squad")].index("A-raid")]
    assert out.startswith("A-raid (squad, recommended)") and card.command in out
    assert all(f"{r.win_pct:.1f}% [{r.ci95[0]:.1f}, {r.ci95[1]:.1f}] (n {r.n}" in out for r in card.win_rates)
    assert zoo_cli.main(["C", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "C"
    assert zoo_cli.main(["no-such-entry"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no zoo entry 'no-such-entry'; entries: A, A-brute" in err


def test_the_coders_grpo_adapter_card_compares_it_with_the_sft_adapter_it_started_from():
    card = read_card(Path(__file__).resolve().parents[1] / "llm" / "adapters" / "smollm2-coder-grpo")
    raw = json.loads((card.directory / CARD_FILE).read_text())
    assert card.init_from == "smollm2-coder-sft" and raw["method"] == "grpo"
    before, after, paired = raw["evaluation"]["stock"], raw["evaluation"]["tuned"], raw["evaluation"]["paired"]
    assert before["adapter"] == "smollm2-coder-sft" and before["replies"] == after["replies"] == paired["replies"]
    assert paired["difference"] == pytest.approx(after["mean_reward"] - before["mean_reward"])
    assert paired["ran_before"] == round(before["compiled"] * before["replies"])
    assert paired["ran_after"] == round(after["compiled"] * after["replies"])
    assert paired["better"] + paired["worse"] + paired["same"] == paired["replies"]
    low, high = paired["difference_ci95"]
    assert 0 < low <= paired["difference"] <= high  # the gain it ships for: the paired CI is above zero
    assert "jaxarena-tune-coder compare" in card.command


def test_the_coders_adapter_card_carries_its_programs_measure(tmp_path):
    card = read_card(Path(__file__).resolve().parents[1] / "llm" / "adapters" / "smollm2-coder-sft")
    assert card.kind == "adapter" and card.plays is None and not card.measured
    raw = json.loads((card.directory / CARD_FILE).read_text())
    tuned = raw["evaluation"]["tuned"]
    assert f"{100 * tuned['compiled']:.0f}%" in card.note and "jaxarena-tune-coder" in card.command
    (tmp_path / "Y").mkdir()
    (tmp_path / "Y" / CARD_FILE).write_text(json.dumps({**raw, "evaluation": {}}))
    with pytest.raises(CardError, match="an incomplete coder adapter card"):
        read_card(tmp_path / "Y")
