"""Helpers the tests share: stand-ins for a server and its surroundings (a fault-injecting and a
TLS proxy, Docker engines real and fake), fixture models built in code, queueing closed forms,
and the harness's own bookkeeping (servers left behind, the re-run policy scripts/test.sh applies: reruns.py)."""
