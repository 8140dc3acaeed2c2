"""The compiled fast path and jsonschema agree on every schema and sample we have."""

import json

import pytest

from master.rules import checker as rule_checker
from message_processing.requests import TYPES, RequestError, checker, decode, request_type
from tests.message_processing.samples import MALFORMED, MAX_BYTES, valid


def samples():
    objects = [valid(n) for n in range(20)]
    for raw, _ in MALFORMED:
        try:
            objects.append(decode(raw, MAX_BYTES))
        except RequestError:
            continue
    return objects


@pytest.mark.parametrize("kind", TYPES)
def test_fast_and_full_validators_agree_on_requests(kind):
    for message in samples():
        try:
            if request_type(message) != kind:
                continue
        except RequestError:
            continue
        full_ok = not list(checker(kind).full.iter_errors(message))
        assert checker(kind).fast_accepts(message) == full_ok, json.dumps(message)[:200]


@pytest.mark.parametrize("spider_type", ["precise", "universal"])
def test_fast_and_full_validators_agree_on_rules(spider_type):
    rules = [message.get("rule") for message in samples() if isinstance(message.get("rule"), dict)]
    assert rules
    for rule in rules:
        full_ok = not list(rule_checker(spider_type).full.iter_errors(rule))
        assert rule_checker(spider_type).fast_accepts(rule) == full_ok, rule
