"""The one way a setting is declared (producer/config.py): flags over variables over defaults, help and
README tables generated from the declaration."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from producer import config
from producer.config import SettingError, at_least, setting
from tools import readme_tables


@dataclass(frozen=True)
class Demo:
    size: int = setting(8, help="how many", check=at_least(1))
    name: str | None = setting(None, help="what to call it", shown="nameless")
    loud: bool = setting(False, help="shout")
    mode: str = setting("a", help="which", choices=("a", "b"), env="OTHER_MODE")
    local: float = setting(1.5, help="flag only", env=False)

    def __post_init__(self) -> None:
        found = config.problems(self)
        if found:
            raise ValueError("; ".join(found))


def resolve(argv: list[str], environ: dict[str, str] | None, defaults: Demo | None = None) -> Demo:
    parser = argparse.ArgumentParser()
    config.add_arguments(parser, Demo, defaults)
    return config.resolve(Demo, parser.parse_args(argv), environ)


def test_a_flag_wins_over_its_variable_which_wins_over_the_default() -> None:
    assert resolve([], {}) == Demo()
    env = {"TICKETQ_SIZE": "3", "TICKETQ_LOUD": "yes", "OTHER_MODE": "b", "TICKETQ_LOCAL": "9"}
    assert resolve([], env) == Demo(size=3, loud=True, mode="b")  # TICKETQ_LOCAL: not a variable of it
    assert resolve(["--size", "5", "--mode", "a"], env) == Demo(size=5, loud=True, mode="a")
    assert resolve(["--size", "8"], env).size == 8  # given, though it equals the default
    assert resolve([], {"TICKETQ_SIZE": ""}).size == 8  # empty: not set
    assert resolve([], None) == Demo()  # no environment read at all


def test_other_defaults_come_from_an_instance_and_show_in_the_help() -> None:
    assert resolve([], {}, Demo(size=2)).size == 2
    parser = argparse.ArgumentParser()
    config.add_arguments(parser, Demo, Demo(size=2))
    helps = {a.dest: a.help or "" for a in parser._actions}
    assert helps["size"] == "how many (default 2) [env TICKETQ_SIZE]"
    assert helps["name"] == "what to call it (default nameless) [env TICKETQ_NAME]"
    assert helps["loud"] == "shout (default off) [env TICKETQ_LOUD]"
    assert helps["local"] == "flag only (default 1.5)"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {"TICKETQ_SIZE": "many"}, "size: invalid literal"),
        ([], {"TICKETQ_LOUD": "maybe"}, "loud: not a boolean"),
        (["--size", "0"], {}, "size: must be >= 1"),
        (["--mode", "c"], {}, "mode: one of a, b"),
        ([], {"OTHER_MODE": "z"}, "mode: one of a, b"),
    ],
)
def test_a_bad_value_is_one_error_naming_the_flag(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        resolve(argv, env)
    assert isinstance(caught.value, SettingError) == ("TICKETQ_" in str(env))


def test_the_readme_tables_are_the_declarations() -> None:
    text = readme_tables.README.read_text(encoding="utf-8")
    assert set(readme_tables.names(text)) == set(readme_tables.TABLES), "a table is missing its markers"
    assert readme_tables.render(text) == text, "README.md is stale: run python -m tools.readme_tables"
