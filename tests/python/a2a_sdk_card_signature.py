"""Our signed A2A card checked with the official A2A Python SDK (a2a-sdk[signing], PyJWT).

Usage: python a2a_sdk_card_signature.py <card URL> <JWKS URL>

1. The spec's verification (A2A v1.0 §8.4), with the SDK's own RFC 8785 canonicalizer
   (`a2a.utils._jcs.canonicalize`) over the card as served without `signatures`, and PyJWT
   checking each JWS with the key its `kid` names in our JWKS, under that key's own algorithm
   (ES256 for P-256, EdDSA for Ed25519): every signature verifies, and none does on a tampered
   card. Each algorithm present in the JWKS is named on stdout ("algs: ...").
2. The SDK's `create_signature_verifier` refuses the same card, and only because it drops
   empty members before canonicalizing (docs/a2a.md, "The Python SDK disagrees"): its
   canonical bytes equal ours once the empty members are removed. Should a future SDK accept
   the card, this fails, so that the docs are updated.
Prints "ok" and exits 0 when all holds; raises otherwise.
"""

import copy
import json
import sys
import urllib.request

import jwt
from google.protobuf.json_format import ParseDict
from jwt import PyJWK
from jwt.utils import base64url_encode

from a2a.types import AgentCard
from a2a.utils._jcs import canonicalize
from a2a.utils.signing import (
    InvalidSignaturesError,
    _canonicalize_agent_card,
    _clean_empty,
    create_signature_verifier,
)


def fetch(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def verified_kids(card, keys):
    """The kids whose signature verifies per the spec: JCS of the card without signatures."""
    unsigned = copy.deepcopy(card)
    signatures = unsigned.pop("signatures")
    payload = base64url_encode(canonicalize(unsigned).encode("utf-8")).decode()
    kids = []
    for entry in signatures:
        header = jwt.get_unverified_header(f"{entry['protected']}.{payload}.{entry['signature']}")
        token = f"{entry['protected']}.{payload}.{entry['signature']}"
        try:
            key = keys[header["kid"]]
            # The key's algorithm only: a header naming another one fails.
            jwt.decode(token, key=key, algorithms=[key.algorithm_name])
        except jwt.PyJWTError:
            continue
        kids.append(header["kid"])
    return kids


def main():
    card_url, jwks_url = sys.argv[1], sys.argv[2]
    card = fetch(card_url)
    keys = {key["kid"]: PyJWK(key) for key in fetch(jwks_url)["keys"]}
    assert len(card["signatures"]) == len(keys) >= 1, card["signatures"]

    assert sorted(verified_kids(card, keys)) == sorted(keys), "a signature did not verify"
    tampered = copy.deepcopy(card)
    tampered["name"] = "Someone else"
    assert verified_kids(tampered, keys) == [], "a tampered card verified"

    parsed = ParseDict(card, AgentCard())
    verifier = create_signature_verifier(lambda kid, jku: keys[kid], ["ES256", "EdDSA"])
    try:
        verifier(parsed)
        raise AssertionError("the SDK verifier now accepts the card: update docs/a2a.md")
    except InvalidSignaturesError:
        pass
    unsigned = copy.deepcopy(card)
    unsigned.pop("signatures")
    assert canonicalize(_clean_empty(unsigned)) == _canonicalize_agent_card(parsed), (
        "the SDK's canonical form differs from ours by more than empty members"
    )
    print("ok")
    print("algs:", " ".join(sorted({key.algorithm_name for key in keys.values()})))


if __name__ == "__main__":
    main()
