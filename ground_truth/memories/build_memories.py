#!/usr/bin/env python3
"""Build the hand-written `memories` evaluation collection for hybridlab.

Everything below is written by hand: an assistant's long-term memory store about a user and the
software projects they worked on together, plus judged queries. The only "randomness" is none:
ids are assigned deterministically by sorting memories on (created_at, key).

Run:  .venv/bin/python ground_truth/memories/build_memories.py
Writes memories.jsonl, queries.jsonl, qrels-test.tsv, eval.json next to this file and validates them.
"""
from __future__ import annotations

import json
import re
import sys
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

OUT = Path(__file__).resolve().parent
NOW = "2026-11-01T00:00:00Z"

MEMS: list[dict] = []
_auto = Counter()


def M(project, when, mtype, tags, content, key=None, **meta):
    """One memory. `project` None = about the user. `when` = 'YYYY-MM-DD HH:MM' (UTC)."""
    if key is None:
        _auto[project or "user"] += 1
        key = f"{project or 'user'}#{_auto[project or 'user']}"
    tag_list = ([project] if project else []) + list(tags)
    metadata = {"project": project} if project else {"scope": "user"}
    metadata.update(meta)
    MEMS.append({"key": key, "when": when, "memory_type": mtype, "tags": tag_list,
                 "content": content, "metadata": metadata})


# ---------------------------------------------------------------------------------------------
# rathole — reverse proxy / NAT-traversal tunnel between a home server and a VPS.
# Deliberately: almost no memory says "rathole" in its content; the project lives in the tag.
# ---------------------------------------------------------------------------------------------
P = "rathole"
M(P, "2024-01-18 20:41", "note", ["architecture", "networking"],
  "How the tunnel is put together: client/server split. The server on the public VPS listens on the "
  "control channel, port 2333, and every forwarded service gets its own data channel opened on demand. "
  "The client at home dials out to the VPS, so nothing inbound has to be opened on the home router.",
  key="rh-arch")
M(P, "2024-01-18 21:05", "fact", ["vps", "hosting"],
  "The tunnel server runs on a Hetzner CX22 VPS in Falkenstein, public IP 49.12.87.211.", key="rh-vps-1")
M(P, "2024-01-19 09:12", "fact", ["nat", "networking"],
  "The home connection sits behind CGNAT (the ISP hands out a 100.64.x.x address), so port forwarding on "
  "the router is impossible; that is the whole reason an outbound tunnel to a VPS was needed.", key="rh-cgnat")
M(P, "2024-01-20 14:30", "decision", ["transport", "noise", "security"],
  "Transport is chosen per service: tcp, tls, noise or websocket. Picked noise "
  "(Noise_NK_25519_ChaChaPoly_BLAKE2s) for the private services because it needs only a keypair, no "
  "certificates to manage.", key="rh-transport")
M(P, "2024-01-22 18:02", "fact", ["config", "toml"],
  "Server config is /etc/rathole/server.toml; each [server.services.<name>] block needs a token and a "
  "bind_addr. The home side mirrors it in client.toml with local_addr pointing at the service on the LAN.",
  key="rh-config")
M(P, "2024-01-25 22:17", "decision", ["systemd", "reliability"],
  "Both ends are managed by systemd template units (rathole@server on the VPS, rathole@client at home) with "
  "Restart=on-failure and RestartSec=5s; if the process dies the unit restarts it automatically.",
  key="rh-systemd")
M(P, "2024-02-03 11:40", "decision", ["security", "tokens"],
  "Every service gets its own token instead of the shared default_token. Tokens are generated with "
  "`openssl rand -hex 32` and stored in pass under infra/tunnel/.", key="rh-token")
M(P, "2024-02-10 16:55", "fact", ["ports", "firewall"],
  "Ports opened in ufw on the VPS: 2333/tcp (control), 8443 (Nextcloud), 2222 (SSH to the home server), "
  "25565 (Minecraft). Everything else stays closed.", key="rh-ports")
M(P, "2024-02-10 17:20", "incident", ["config", "ports"],
  "Gotcha we hit: bind_addr on the server side was 127.0.0.1:8443, so the forwarded port only answered "
  "from the VPS itself. It has to be 0.0.0.0:8443.", key="rh-bind")
M(P, "2024-02-11 10:03", "note", ["ssh", "ports", "security"],
  "SSH to the home server goes through the VPS: `ssh -p 2222 me@<vps>` lands on homeserver:22. Password "
  "auth must stay disabled there because it is now reachable from the internet.", key="rh-ssh")
M(P, "2024-03-14 23:48", "incident", ["networking", "minecraft"],
  "Friends on the Minecraft server kept getting 'Connection reset' / ECONNRESET every few minutes. Root "
  "cause was the ISP's NAT silently dropping idle connections after ~5 minutes, not the game server.",
  key="rh-econnreset")
M(P, "2024-03-15 12:10", "decision", ["config", "reliability"],
  "Fix for the idle drops: heartbeat_interval = 30 on the server and heartbeat_timeout = 90 on the client. "
  "No silent stalls since.", key="rh-heartbeat")
M(P, "2024-04-06 19:25", "preference", ["logging", "systemd"],
  "User wants the tunnel logs in journald only: RUST_LOG=info goes in the unit's Environment= line and "
  "`journalctl -u rathole@server -f` is the first thing to run when debugging.", key="rh-logs")
M(P, "2024-05-02 15:33", "note", ["build", "rust"],
  "Server binary is built with `cargo build --release --no-default-features --features server,noise,tls` "
  "to keep it around 3 MB; the aarch64 build needs `cross`.", key="rh-build")
M(P, "2024-06-08 13:14", "decision", ["tls", "certificates"],
  "Switched the public Nextcloud service from noise to the tls transport so browsers-facing traffic uses a "
  "real certificate: Let's Encrypt cert for tunnel.mkdev.net, issued by certbot with the DNS-01 challenge "
  "against Cloudflare.", key="rh-tls")
M(P, "2024-06-09 10:50", "incident", ["tls", "certificates", "monitoring"],
  "Uptime Kuma flagged the Nextcloud monitor with ERR_TLS_CERT_ALTNAME_INVALID: it was probing "
  "https://49.12.87.211:8443 by IP, and the cert only lists tunnel.mkdev.net as SAN. Pointed the monitor at "
  "the hostname instead.", key="rh-altname")
M(P, "2024-09-02 08:21", "incident", ["tls", "certificates", "systemd"],
  "Cert 'expired' on 2024-09-01 even though certbot had renewed it: the server process still held the old "
  "one in memory. Added a deploy hook in /etc/letsencrypt/renewal-hooks/deploy/ that runs "
  "`systemctl reload-or-restart rathole@server`.", key="rh-renew")
M(P, "2024-11-20 21:12", "note", ["udp", "networking", "wireguard"],
  "UDP forwarding works (type = \"udp\" in the service block); it carries the WireGuard fallback on 51820. "
  "Latency is about 8 ms worse than a direct connection.", key="rh-udp")
M(P, "2025-01-30 18:45", "decision", ["upgrades", "release-process"],
  "Pinned v0.5.0 on both ends. Client and server versions must match or the handshake breaks, so they get "
  "upgraded in the same maintenance window.", key="rh-pin")
M(P, "2025-04-12 20:02", "incident", ["tokens", "security"],
  "Rotated every service token after the old laptop was wiped. server.toml and client.toml have to be "
  "updated together, otherwise the client logs an authentication failure and retries forever.",
  key="rh-rotate")
M(P, "2025-07-20 17:44", "fact", ["vps", "hosting"],
  "The tunnel server moved off Hetzner to an Oracle Cloud free-tier ARM instance in Frankfurt, public IP "
  "130.61.24.98.", key="rh-vps-2")
M(P, "2025-08-10 11:05", "note", ["ipv6", "networking"],
  "The ARM instance has IPv6, so the control channel now also listens on [::]:2333 and the home client "
  "prefers IPv6, which sidesteps CGNAT on that path.", key="rh-ipv6")
M(P, "2026-05-03 14:27", "fact", ["vps", "hosting"],
  "The tunnel server now runs on a Netcup VPS 1000 G11 in Nuremberg, public IP 152.53.18.40; Oracle "
  "reclaimed the free-tier instance.", key="rh-vps-3")

# ---------------------------------------------------------------------------------------------
# cachekit — Python caching library. Talks generically about "codebase architecture" (a trap).
# ---------------------------------------------------------------------------------------------
P = "cachekit"
M(P, "2024-02-05 10:15", "note", ["architecture"],
  "Overview of the cachekit codebase architecture: a small core (cachekit/core.py with the Cache facade), "
  "pluggable backends in cachekit/backends/ (memory, redis, sqlite), serializers in cachekit/serde/ and the "
  "decorators in cachekit/decorators.py. Backends never know about serialization.", key="ck-arch")
M(P, "2024-02-06 09:40", "decision", ["project-structure", "testing"],
  "Project structure rule: tests mirror the package layout (tests/backends/test_redis.py and so on) and "
  "anything private goes under cachekit/_internal/.", key="ck-layout")
M(P, "2024-02-07 16:22", "note", ["architecture", "docs"],
  "Architecture decisions are written down as short ADRs in docs/adr/ (0001-pluggable-backends.md, "
  "0002-no-pickle-default.md). User likes one ADR per decision, max one page.", key="ck-adr")
M(P, "2024-02-20 14:05", "decision", ["security", "serialization"],
  "Decided never to make pickle the default serializer: msgpack is the default, JSON the fallback, and "
  "pickle stays opt-in via serializer=\"pickle\" with a warning.", key="ck-pickle")
M(P, "2024-03-02 11:11", "decision", ["config", "ttl"],
  "default_ttl for the cachekit Cache facade is 300 seconds; callers can override it per call with ttl=.",
  key="ck-ttl-1")
M(P, "2024-03-20 13:47", "fact", ["ci", "testing"],
  "CI is GitHub Actions with a matrix over Python 3.9-3.12 and redis 6/7; the redis jobs use a service container.",
  key="ck-ci")
M(P, "2024-04-10 15:58", "decision", ["concurrency", "redis"],
  "To avoid stampedes, get_or_set takes a per-key asyncio.Lock in the memory backend and a SET NX lock key "
  "(`lock:{key}`, 10 s expiry) in redis.", key="ck-stampede")
M(P, "2024-05-12 10:30", "fact", ["redis", "config"],
  "The redis backend accepts max_connections (default 50) for its connection pool; integration tests run "
  "against redis:7-alpine in docker.", key="ck-maxconn")
M(P, "2024-06-01 17:09", "decision", ["eviction", "performance"],
  "Memory backend is LRU on an OrderedDict with maxsize. LFU was prototyped and dropped: move_to_end made "
  "LRU much cheaper.", key="ck-lru")
M(P, "2024-07-11 12:00", "decision", ["release-process", "pypi"],
  "Release process: bump the version in pyproject.toml, update CHANGELOG.md, tag vX.Y.Z; the publish "
  "workflow uploads to PyPI with trusted publishing, so no API token is stored anywhere.", key="ck-release")
M(P, "2024-08-03 09:55", "preference", ["typing", "code-review"],
  "User insists the public API is fully typed and passes mypy --strict; code review blocks on Any in "
  "public signatures.", key="ck-typing")
M(P, "2024-09-18 19:30", "incident", ["bug", "decorators"],
  "Bug: @cached built keys from repr() of the arguments, so two equal dicts with different insertion order "
  "got different keys. Fixed by hashing a canonical msgpack encoding with sorted kwargs.", key="ck-keybug")
M(P, "2024-10-05 08:44", "todo", ["docs"],
  "TODO: write a docs page comparing cachekit with cachetools and aiocache (features, async support, backends).",
  key="ck-docs")
M(P, "2025-01-14 16:20", "decision", ["config", "ttl"],
  "Raised default_ttl of the cachekit Cache facade from 300 to 600 seconds after complaints about redis "
  "load; per-call ttl= overrides are unchanged.", key="ck-ttl-2")
M(P, "2025-03-22 14:48", "decision", ["async", "architecture"],
  "Async design: a separate AsyncCache class rather than making Cache methods work both sync and async; "
  "both share the backend protocol through a thin adapter.", key="ck-async")
M(P, "2025-06-30 10:10", "note", ["metrics"],
  "Added hit/miss/eviction counters behind Cache.stats(); a Prometheus exporter is deliberately left to users.",
  key="ck-stats")
M(P, "2025-09-10 15:35", "decision", ["invalidation", "redis"],
  "Tag-based invalidation: entries may carry tags and invalidate_tag('user:42') drops them all; the redis "
  "backend keeps one SET per tag.", key="ck-invalidate")
M(P, "2025-11-02 11:25", "decision", ["deprecation", "release_process"],
  "Dropped Python 3.9 in cachekit 3.0.0, after the deprecation warning had shipped for two minor versions.",
  key="ck-py39")
M(P, "2026-02-09 09:05", "decision", ["config", "ttl"],
  "default_ttl of the cachekit Cache facade is now 900 seconds (changed in 2.3.0); the changelog flags it "
  "as a behaviour change.", key="ck-ttl-3")

# ---------------------------------------------------------------------------------------------
# litesearch — small search engine (Python, own inverted index, FastAPI server)
# ---------------------------------------------------------------------------------------------
P = "litesearch"
M(P, "2024-03-10 20:20", "note", ["architecture", "project-structure"],
  "Project structure: indexer/ (tokenizer, inverted-index writer), query/ (parser, BM25 scorer), server/ "
  "(FastAPI app) and cli.py. The codebase keeps the on-disk index format in a single module, segments.py.",
  key="ls-structure")
M(P, "2024-03-12 09:15", "decision", ["architecture", "ci"],
  "Module layout rule: query/ may import indexer/ types but never the reverse; enforced with import-linter "
  "in CI.", key="ls-layers")
M(P, "2024-04-02 14:02", "decision", ["api", "pagination"],
  "Search API pagination uses page_size (default 20, max 100) plus an opaque cursor. Offset pagination was "
  "rejected because deep pages got slow.", key="ls-page")
M(P, "2024-04-20 11:31", "fact", ["api", "filters"],
  "Filters are added with QueryBuilder.add_filter(field, op, value). Only keyword and numeric fields are "
  "filterable; a text field raises FilterError.", key="ls-filter")
M(P, "2024-05-08 18:40", "fact", ["staging", "deployment"],
  "The litesearch staging server is at 10.0.3.12 (the old Proxmox VM); deploys are an rsync plus a "
  "systemd restart.", key="ls-stg-1")
M(P, "2024-05-09 10:05", "fact", ["cli", "docker"],
  "Inside containers you need `litesearch serve --bind-addr 0.0.0.0:7700`; by default it binds 127.0.0.1 only.",
  key="ls-bindaddr")
M(P, "2024-06-15 16:45", "decision", ["tokenization"],
  "Tokenizer uses Snowball English stemming. User wanted a per-field switch to turn stemming off for code "
  "identifiers; added as stem = false in the schema.", key="ls-stem")
M(P, "2024-07-01 13:13", "fact", ["ranking", "config"],
  "BM25 defaults are k1 = 1.2 and b = 0.75, configurable per index in schema.toml.", key="ls-bm25")
M(P, "2024-08-14 09:50", "note", ["index"],
  "Index is segment based: a merge runs once more than 8 segments exist, and deletes are tombstones until "
  "the next merge.", key="ls-segments")
M(P, "2024-11-03 22:35", "incident", ["index", "bug"],
  "Index corruption after the staging VM ran out of disk in the middle of a merge. Fixed by writing merged "
  "segments to a temp file and renaming atomically with os.replace.", key="ls-corrupt")
M(P, "2025-02-10 15:00", "note", ["benchmark", "performance"],
  "Benchmark on 1M Wikipedia abstracts: p50 query latency 4 ms, p99 31 ms; indexing runs at about 9k docs/s "
  "on the Ryzen desktop.", key="ls-bench")
M(P, "2025-03-19 12:30", "fact", ["staging", "deployment"],
  "The litesearch staging server moved to 10.0.5.40 on the new VLAN; the 10.0.3.12 VM is gone.",
  key="ls-stg-2")
M(P, "2025-05-05 17:20", "todo", ["search"],
  "TODO: typo tolerance with Levenshtein automata, max edit distance 1 for terms shorter than 6 characters.",
  key="ls-fuzzy")
M(P, "2025-08-19 10:40", "decision", ["release-process", "ci"],
  "Release process: tag on main, GitHub Actions builds wheels with cibuildwheel, and the staging deploy runs "
  "after the tag is pushed.", key="ls-release")
M(P, "2025-10-11 14:14", "preference", ["code-review", "benchmark"],
  "For PRs touching the scorer or tokenizer, the user wants a benchmark run attached to the review.",
  key="ls-review")
M(P, "2026-01-15 11:00", "decision", ["performance", "api"],
  "Snippets and highlighting are computed lazily, only for the returned page and never for all hits.",
  key="ls-highlight")
M(P, "2026-06-22 16:05", "fact", ["staging", "deployment", "fly.io"],
  "litesearch staging now runs on fly.io as the app litesearch-stg (region ams); the 10.0.5.40 box is "
  "decommissioned.", key="ls-stg-3")

# ---------------------------------------------------------------------------------------------
# brookflow — data pipeline (Python ingestion + dbt + Dagster, Postgres warehouse)
# ---------------------------------------------------------------------------------------------
P = "brookflow"
M(P, "2024-04-01 09:30", "note", ["architecture", "project-structure"],
  "Codebase layout: sources/ holds one ingestion job per upstream system (they land raw JSON in S3), dbt/ "
  "turns that into warehouse tables, and orchestration/ has the Dagster definitions that run both.",
  key="bf-arch")
M(P, "2024-04-05 11:00", "fact", ["schedule"],
  "The nightly brookflow run is scheduled at 02:00 UTC.", key="bf-sched-1")
M(P, "2024-05-20 15:42", "fact", ["postgres", "database"],
  "Warehouse is Postgres 15 on RDS (db.r6g.large); max_connections is 200 and dbt runs with 8 threads.",
  key="bf-pg")
M(P, "2024-06-11 10:25", "decision", ["dbt", "performance"],
  "Big fact tables are incremental dbt models with unique_key and on_schema_change='append_new_columns'.",
  key="bf-incr")
M(P, "2024-07-22 21:10", "incident", ["dbt", "data-quality"],
  "A backfill of 2023 orders double-counted refunds because the incremental filter used updated_at instead of "
  "event_time. Reran fct_orders with --full-refresh.", key="bf-backfill")
M(P, "2024-08-05 09:18", "decision", ["data-quality", "testing"],
  "Every dbt model gets not_null + unique tests on its grain; freshness checks on sources warn at 26h and "
  "error at 48h.", key="bf-tests")
M(P, "2024-09-09 14:00", "decision", ["privacy", "pii"],
  "Emails and phone numbers are hashed (sha256 with a salt from SSM) in the staging layer; raw PII never "
  "reaches the marts.", key="bf-pii")
M(P, "2024-10-16 16:30", "fact", ["alerting", "slack"],
  "Failed Dagster runs post to #data-alerts in Slack through a run_failure_sensor; the message links the run page.",
  key="bf-alerts")
M(P, "2024-12-03 11:45", "decision", ["postgres", "warehouse"],
  "Evaluated Snowflake and decided to stay on Postgres for now: data volume is ~40 GB and the cost did not "
  "justify it. Revisit above 500 GB.", key="bf-snowflake")
M(P, "2025-02-18 08:50", "fact", ["schedule"],
  "Moved the nightly brookflow run to 03:30 UTC so it starts after the upstream CRM export finishes.",
  key="bf-sched-2")
M(P, "2025-04-28 13:33", "incident", ["postgres", "database"],
  "Run failed with 'FATAL: remaining connection slots are reserved for non-replication superuser "
  "connections'. Too many dbt threads plus Metabase; added PgBouncer in transaction mode.", key="bf-slots")
M(P, "2025-07-07 10:12", "note", ["s3", "storage"],
  "Raw landing bucket is s3://brookflow-raw-eu with a 90-day lifecycle rule to Glacier; partitions are "
  "source=/dt=YYYY-MM-DD/.", key="bf-s3")
M(P, "2025-10-21 15:27", "todo", ["ci", "dbt"],
  "TODO: run `dbt build --select state:modified+` in CI against a slim copy of prod so PRs only build "
  "what changed.", key="bf-slimci")
M(P, "2026-03-09 07:58", "fact", ["schedule"],
  "The nightly brookflow run now starts at 04:15 UTC; the CRM export got slower after their migration.",
  key="bf-sched-3")
M(P, "2026-07-14 12:40", "decision", ["code-review", "dbt"],
  "Any change to a mart model needs a reviewer from the finance analytics team, enforced with CODEOWNERS "
  "on dbt/models/marts/.", key="bf-owners")

# ---------------------------------------------------------------------------------------------
# pantrypal — mobile app (Expo / React Native) + small Node API
# ---------------------------------------------------------------------------------------------
P = "pantrypal"
M(P, "2024-03-15 19:00", "fact", ["ios", "compatibility"],
  "pantrypal minimum supported iOS version is iOS 15.", key="pp-ios-1")
M(P, "2024-03-18 20:30", "note", ["architecture", "project-structure"],
  "App structure: Expo Router with app/(tabs)/ for screens, a features/ folder per domain (pantry, "
  "shopping, recipes) and a shared ui/ kit. Client state in Zustand stores, server data via TanStack Query.",
  key="pp-structure")
M(P, "2024-04-22 21:15", "decision", ["offline", "sqlite"],
  "Offline first: the pantry list lives in expo-sqlite and syncs with the API when the device is back "
  "online; last-write-wins per item using updated_at.", key="pp-offline")
M(P, "2024-05-30 18:45", "fact", ["barcode", "api"],
  "Barcode lookups go to our own mirror of Open Food Facts behind api.pantrypal.app/products/{ean}; "
  "unknown EANs fall back to manual entry.", key="pp-barcode")
M(P, "2024-06-14 22:05", "incident", ["tls", "backend"],
  "The Node API threw ERR_TLS_CERT_ALTNAME_INVALID when calling the Open Food Facts mirror by its IP "
  "address; the certificate is issued for off.pantrypal.internal. Switched the call to the hostname.",
  key="pp-altname")
M(P, "2024-08-08 17:10", "incident", ["app-store", "release-process"],
  "App Store review rejected 1.3.0 under guideline 5.1.1 because camera permission text was too vague; "
  "NSCameraUsageDescription now says it scans barcodes of groceries.", key="pp-reject")
M(P, "2024-09-25 19:40", "decision", ["notifications"],
  "Expiry reminders use local notifications scheduled on device (expo-notifications), not push, so no "
  "server-side job is needed.", key="pp-notif")
M(P, "2024-11-12 18:20", "decision", ["release-process", "eas"],
  "Release process: EAS Build on the main branch, internal TestFlight + Play internal track first, then "
  "promote after two days without new Sentry issues.", key="pp-release")
M(P, "2025-01-20 20:00", "fact", ["ios", "compatibility"],
  "Raised pantrypal minimum iOS version to iOS 16 to use the newer DataScanner barcode API.", key="pp-ios-2")
M(P, "2025-03-03 21:30", "preference", ["i18n"],
  "User wants German and English from day one; strings live in locales/de.json and locales/en.json via "
  "i18next, no hard-coded UI text.", key="pp-i18n")
M(P, "2025-06-18 19:05", "incident", ["crash", "android"],
  "Android crash on startup in 2.1.0: 'Invariant Violation: TurboModuleRegistry.getEnforcing' after the "
  "RN upgrade; a stale expo-camera native module. Fixed by a clean prebuild.", key="pp-turbo")
M(P, "2025-09-09 18:00", "todo", ["recipes"],
  "TODO: suggest recipes from items that expire within 3 days; start with a simple ingredient overlap score.",
  key="pp-recipes")
M(P, "2026-04-02 19:30", "fact", ["ios", "compatibility"],
  "pantrypal minimum iOS version is now iOS 17, after analytics showed under 2% of users still on iOS 16.",
  key="pp-ios-3")
M(P, "2026-08-27 20:45", "decision", ["sentry", "monitoring"],
  "Sentry sample rate for performance traces is 0.1 in production; session replay stays off for privacy.",
  key="pp-sentry")

# ---------------------------------------------------------------------------------------------
# homelab — Proxmox, ZFS, VLANs, backups
# ---------------------------------------------------------------------------------------------
P = "homelab"
M(P, "2024-01-08 20:10", "note", ["architecture", "proxmox"],
  "Homelab layout: one Proxmox node (Ryzen 7 5700G, 64 GB ECC) running VMs for Nextcloud, Home Assistant and "
  "dev boxes, plus a separate TrueNAS box with a 4x8 TB RAIDZ1 pool named tank.", key="hl-layout")
M(P, "2024-02-14 19:22", "fact", ["backups", "nas"],
  "Homelab NAS backups go to a Backblaze B2 bucket (hl-backup) with restic, nightly at 01:00.", key="hl-bk-1")
M(P, "2024-03-03 15:40", "fact", ["networking", "vlan"],
  "VLANs: 10 = trusted LAN, 20 = IoT (no internet except NTP), 30 = servers on 10.0.3.0/24. The UniFi "
  "gateway does inter-VLAN firewalling.", key="hl-vlan")
M(P, "2024-04-19 21:05", "decision", ["dns", "networking"],
  "DNS: two Pi-hole instances (VM + Raspberry Pi) with unbound as recursive resolver; DHCP hands out both.",
  key="hl-dns")
M(P, "2024-06-02 10:30", "incident", ["zfs", "storage"],
  "Monthly scrub found 12 checksum errors on ada2 in tank; SMART showed reallocated sectors rising. Disk "
  "replaced with `zpool replace tank ada2 ada5`, resilver took 9 hours.", key="hl-scrub")
M(P, "2024-08-30 18:55", "fact", ["power", "ups"],
  "APC UPS on the rack is monitored with NUT; the TrueNAS box is the NUT server and Proxmox shuts down "
  "gracefully at 40% battery.", key="hl-ups")
M(P, "2024-12-15 16:15", "fact", ["networking", "vlan"],
  "New servers VLAN 50 on 10.0.5.0/24 replaced VLAN 30; all VMs were re-addressed during the move.",
  key="hl-vlan50")
M(P, "2025-02-22 17:35", "fact", ["backups", "nas"],
  "Homelab NAS backups now go to rsync.net via zfs send of nightly snapshots; the B2 bucket is kept read-only "
  "for 90 days, then deleted.", key="hl-bk-2")
M(P, "2025-05-17 14:10", "fact", ["gpu", "hardware"],
  "Added an RTX 4090 to the Proxmox node, passed through to the ml-box VM (IOMMU group 14, vfio-pci).",
  key="hl-gpu")
M(P, "2025-09-27 11:50", "decision", ["systemd", "automation"],
  "Replaced the cron jobs on the Proxmox host with systemd timers (OnCalendar=daily, Persistent=true) so "
  "missed runs fire after a reboot.", key="hl-timers")
M(P, "2026-01-11 15:25", "note", ["home-assistant"],
  "Home Assistant runs as a HAOS VM; Zigbee via a SkyConnect dongle passed through by USB id. Automations are "
  "kept in YAML in a git repo, not the UI.", key="hl-ha")
M(P, "2026-06-06 13:00", "fact", ["backups", "nas"],
  "Homelab NAS backups now go to a Hetzner Storage Box (BX21) with borg, nightly at 01:30; the rsync.net "
  "account was cancelled.", key="hl-bk-3")
M(P, "2026-09-19 20:40", "todo", ["upgrades", "proxmox"],
  "TODO: upgrade the Proxmox node to PVE 9 once the ZFS 2.3 issues on kernel 6.14 are resolved.",
  key="hl-pve9")

# ---------------------------------------------------------------------------------------------
# inkwell — personal blog (Hugo)
# ---------------------------------------------------------------------------------------------
P = "inkwell"
M(P, "2024-01-28 11:20", "fact", ["hosting", "deployment"],
  "The inkwell blog is hosted on GitHub Pages, built by a GitHub Actions workflow on push to main.",
  key="ink-host-1")
M(P, "2024-02-02 10:05", "decision", ["hugo", "theme"],
  "Blog uses Hugo with a forked PaperMod theme kept as a git submodule under themes/; overrides live in "
  "layouts/ so the fork stays close to upstream.", key="ink-theme")
M(P, "2024-04-14 16:40", "preference", ["writing"],
  "User drafts posts in content/drafts/ with draft: true and wants a publish checklist: spell-check, alt "
  "text on every image, and a one-sentence summary in the front matter.", key="ink-drafts")
M(P, "2024-07-02 12:12", "decision", ["images", "performance"],
  "Images are converted to WebP at build time with Hugo image processing (Resize \"1200x q80 webp\"); "
  "originals stay in assets/.", key="ink-images")
M(P, "2024-10-20 09:45", "decision", ["comments"],
  "Comments via giscus (GitHub Discussions) instead of Disqus, because no tracking and no ads.",
  key="ink-comments")
M(P, "2025-02-08 14:30", "fact", ["hosting", "deployment"],
  "The inkwell blog moved from GitHub Pages to Netlify for deploy previews on pull requests.",
  key="ink-host-2")
M(P, "2025-05-24 10:55", "decision", ["rss"],
  "RSS feed now includes full post content rather than summaries; user reads blogs in a feed reader and "
  "hates truncated feeds.", key="ink-rss")
M(P, "2025-08-31 17:00", "fact", ["analytics", "privacy"],
  "Analytics are self-hosted Plausible on the homelab, reachable through the tunnel; no cookie banner needed.",
  key="ink-analytics")
M(P, "2026-01-04 13:15", "fact", ["hosting", "deployment"],
  "The inkwell blog is now hosted on Cloudflare Pages; Netlify's build minutes ran out twice in December.",
  key="ink-host-3")
M(P, "2026-03-28 18:20", "incident", ["hugo", "build"],
  "Build broke after Hugo 0.146 changed template lookup: the theme's partials/head.html was ignored. Pinned "
  "HUGO_VERSION=0.145.0 in the Pages settings until the theme catches up.", key="ink-hugo")

# ---------------------------------------------------------------------------------------------
# loomtrain — ML training repo (PyTorch, Hydra, W&B)
# ---------------------------------------------------------------------------------------------
P = "loomtrain"
M(P, "2024-05-06 10:00", "note", ["architecture", "project-structure"],
  "Repo layout: configs/ holds Hydra YAML, loomtrain/models and loomtrain/data hold the code, scripts/train.py "
  "is the entry point; every run is tracked in the W&B project 'loom'.", key="lt-layout")
M(P, "2024-05-10 14:20", "fact", ["gpu", "compute"],
  "loomtrain training runs on a Lambda Cloud A10 (24 GB) instance, started on demand.", key="lt-gpu-1")
M(P, "2024-06-03 16:35", "incident", ["gpu", "memory"],
  "torch.cuda.OutOfMemoryError at seq_len 2048, batch 16. Fixed with activation (gradient) checkpointing "
  "and bf16 autocast; peak memory dropped from 31 GB to 19 GB.", key="lt-oom")
M(P, "2024-06-20 11:10", "decision", ["hyperparameters"],
  "Baseline schedule: AdamW, lr 3e-4, cosine decay with 2000 warmup steps, weight_decay 0.1, grad clip 1.0.",
  key="lt-lr")
M(P, "2024-07-15 09:05", "decision", ["reproducibility"],
  "Every run sets seed via loomtrain.utils.seed_everything(cfg.seed) and logs the git SHA and the resolved "
  "Hydra config to W&B.", key="lt-seed")
M(P, "2024-09-12 13:55", "decision", ["checkpoints", "storage"],
  "Checkpoints every 1000 steps, keep the last 3 plus the best by validation loss; stored as safetensors "
  "in checkpoints/<run_id>/.", key="lt-ckpt")
M(P, "2024-11-21 18:40", "incident", ["distributed", "nccl"],
  "Two-GPU DDP run hung and then died with a NCCL watchdog timeout after 1800 s; one rank was stuck in the "
  "eval loop because of an uneven last batch. Fixed with drop_last=True on the eval sampler.", key="lt-nccl")
M(P, "2025-01-09 15:15", "fact", ["gpu", "compute"],
  "loomtrain training moved to a rented RTX 4090 on vast.ai (about $0.40/h) instead of the Lambda A10.",
  key="lt-gpu-2")
M(P, "2025-04-03 10:45", "decision", ["data", "preprocessing"],
  "Training data is deduplicated with MinHash (5-gram shingles, threshold 0.8) before tokenization; "
  "removes about 11% of documents.", key="lt-dedup")
M(P, "2025-06-11 12:25", "fact", ["gpu", "compute"],
  "loomtrain training now runs on the user's own RTX 4090 in the homelab ml-box VM; the vast.ai rentals stopped.",
  key="lt-gpu-3")
M(P, "2025-08-22 16:00", "preference", ["experiments"],
  "User wants every experiment named <date>-<short-purpose> (e.g. 2025-08-22-rope-scaling) and a one-line "
  "hypothesis in the W&B run notes.", key="lt-naming")
M(P, "2026-02-17 09:50", "note", ["evaluation"],
  "Eval suite: held-out perplexity on 2k documents plus a small downstream set; evaluate every 5000 steps "
  "and on the final checkpoint only.", key="lt-eval")

# ---------------------------------------------------------------------------------------------
# dotsync — CLI tool in Go that syncs dotfiles between machines
# ---------------------------------------------------------------------------------------------
P = "dotsync"
M(P, "2024-02-25 21:00", "fact", ["go", "toolchain"],
  "dotsync targets Go 1.21 (go.mod: go 1.21).", key="ds-go-1")
M(P, "2024-02-26 20:35", "note", ["architecture", "cli"],
  "Design of the tool: cobra commands in cmd/ (init, add, push, pull, status), a planner in internal/plan "
  "that computes link/copy operations, and an executor that applies them. The planner is pure so it can be "
  "tested without touching the filesystem.", key="ds-design")
M(P, "2024-03-09 19:50", "decision", ["symlinks", "windows"],
  "Symlink by default, copy mode opt-in per file; on Windows fall back to copies unless Developer Mode "
  "allows unprivileged symlinks.", key="ds-symlink")
M(P, "2024-03-30 22:10", "fact", ["config"],
  "Config lives in ~/.config/dotsync/config.yaml; the repo path, the machine profile and per-host "
  "overrides (hosts.<hostname>.include) go there.", key="ds-config")
M(P, "2024-04-18 20:00", "decision", ["safety", "cli"],
  "`dotsync pull` verifies SHA-256 checksums of the manifest before touching files. There is a --no-verify "
  "flag for broken manifests, but it prints a loud warning and the user wants it hidden from --help.",
  key="ds-noverify")
M(P, "2024-05-14 21:25", "decision", ["cli", "ux"],
  "Every mutating command supports --dry-run, which prints the plan as a table (op, source, target) and exits 0.",
  key="ds-dryrun")
M(P, "2024-06-29 18:15", "decision", ["release-process", "goreleaser"],
  "Release process: goreleaser on tag push builds linux/darwin/windows for amd64+arm64 and updates the "
  "Homebrew tap user/homebrew-tap.", key="ds-release")
M(P, "2024-08-16 20:45", "decision", ["testing"],
  "End-to-end tests use testscript (.txtar files in testdata/script/) so each CLI scenario is a readable script.",
  key="ds-testscript")
M(P, "2024-10-01 19:30", "fact", ["go", "toolchain"],
  "dotsync moved to Go 1.22 to use range-over-int and the new ServeMux patterns in the tiny status server.",
  key="ds-go-2")
M(P, "2024-12-07 16:05", "incident", ["bug", "conflicts"],
  "Bug: pull overwrote a locally edited .zshrc without asking. Now a file whose hash differs from both the "
  "last-synced and the incoming version is a conflict and is written as .zshrc.dotsync-conflict.",
  key="ds-conflict")
M(P, "2025-03-15 21:40", "preference", ["error-handling", "go"],
  "User wants errors wrapped with %w and a short lower-case context ('plan: read manifest: ...'), never "
  "panics outside main.", key="ds-errors")
M(P, "2025-07-04 20:20", "todo", ["encryption"],
  "TODO: age-encrypted secrets (files matching *.secret) decrypted on pull using the key from "
  "~/.config/dotsync/age.key.", key="ds-age")
M(P, "2025-09-06 18:00", "fact", ["go", "toolchain"],
  "dotsync now targets Go 1.23 (go.mod: go 1.23, toolchain go1.23.2); CI tests the two latest Go releases.",
  key="ds-go-3")
M(P, "2026-05-20 19:10", "note", ["windows", "bug"],
  "On Windows, paths under %APPDATA% need long-path support; the executor now prefixes \\\\?\\ for paths "
  "over 260 characters.", key="ds-longpath")

# ---------------------------------------------------------------------------------------------
# ferrox — Rust image thumbnailing service (axum + libvips)
# ---------------------------------------------------------------------------------------------
P = "ferrox"
M(P, "2024-04-11 10:20", "note", ["architecture", "rust"],
  "Internals: axum router -> handlers -> a bounded pool of blocking workers that call libvips for resizing; "
  "originals come from S3 and thumbnails are cached on local NVMe with an LRU index.", key="fx-arch")
M(P, "2024-04-12 09:00", "fact", ["rust", "msrv"],
  "ferrox MSRV is Rust 1.70 (rust-version in Cargo.toml).", key="fx-msrv-1")
M(P, "2024-05-03 15:45", "incident", ["rust", "borrow-checker"],
  "Hit E0502 in ThumbCache::get_or_insert (cannot borrow self.entries as mutable because it is also borrowed "
  "as immutable). Solved by switching to the HashMap entry API instead of get-then-insert.", key="fx-e0502")
M(P, "2024-05-28 11:30", "decision", ["error-handling", "rust"],
  "Error handling: thiserror enums in the library crates, anyhow only in the binary; handlers map errors to "
  "HTTP via an IntoResponse impl on AppError.", key="fx-errors")
M(P, "2024-07-09 14:15", "decision", ["rate limiting", "security"],
  "Rate limiting with tower_governor: 50 requests/s per client IP, burst 100; requests over the limit get 429 "
  "with Retry-After.", key="fx-ratelimit")
M(P, "2024-08-21 16:50", "incident", ["memory", "libvips"],
  "RSS grew to 6 GB over a day. libvips' operation cache was on by default; set vips_cache_set_max(0) at "
  "startup and memory stays flat around 400 MB.", key="fx-leak")
M(P, "2024-10-14 10:10", "decision", ["observability", "tracing"],
  "Observability: tracing + tracing-opentelemetry exporting to the Tempo instance; every request span carries "
  "the image key and the output size.", key="fx-tracing")
M(P, "2024-12-19 13:25", "fact", ["rust", "msrv"],
  "ferrox MSRV bumped to Rust 1.75 for async fn in traits.", key="fx-msrv-2")
M(P, "2025-02-04 17:40", "decision", ["ci", "security"],
  "CI runs cargo deny (licenses + advisories), clippy with -D warnings and cargo test on stable and the MSRV.",
  key="fx-ci")
M(P, "2025-04-16 12:05", "fact", ["deployment", "kubernetes"],
  "Deployed on the k3s cluster as a Deployment with 3 replicas; readiness probe on /healthz, and the NVMe "
  "cache is a hostPath volume, so pods are pinned to the two storage nodes.", key="fx-deploy")
M(P, "2025-06-25 15:20", "note", ["performance", "formats"],
  "AVIF output is 30-40% smaller than WebP but 5x slower to encode; serve AVIF only when the Accept header "
  "asks for it and the image is under 4 MP.", key="fx-avif")
M(P, "2025-10-30 10:35", "fact", ["rust", "msrv"],
  "ferrox MSRV is now Rust 1.80 (needed for LazyLock); rust-version updated in the workspace Cargo.toml.",
  key="fx-msrv-3")
M(P, "2026-03-12 14:50", "incident", ["rust", "async"],
  "Worker pool deadlock: a handler held a tokio::sync::Mutex guard across .await on spawn_blocking. Now the "
  "guard is dropped before awaiting; clippy's await_holding_lock is denied.", key="fx-deadlock")
M(P, "2026-08-03 11:15", "todo", ["api"],
  "TODO: signed URLs for thumbnails (HMAC-SHA256 over path + expiry) so the service can't be used as an "
  "open image proxy.", key="fx-signed")

# ---------------------------------------------------------------------------------------------
# tabtamer — browser extension (Manifest V3) that groups and suspends tabs
# ---------------------------------------------------------------------------------------------
P = "tabtamer"
M(P, "2024-06-05 21:30", "note", ["architecture", "mv3"],
  "How the extension works: a background service worker tracks tab activity through chrome.tabs events, the "
  "popup is a small Svelte app, and there are no content scripts at all, which keeps the permission list short.",
  key="tt-how")
M(P, "2024-06-07 20:00", "decision", ["mv3", "service-worker"],
  "Because MV3 service workers get killed after ~30 s idle, nothing is kept in globals; state goes to "
  "chrome.storage.session and timers use chrome.alarms.", key="tt-sw")
M(P, "2024-07-19 22:15", "incident", ["storage", "bug"],
  "Saving group rules failed with QUOTA_BYTES_PER_ITEM exceeded in chrome.storage.sync (8 KB per item). Rules "
  "are now split into one key per rule.", key="tt-quota")
M(P, "2024-08-27 19:45", "decision", ["permissions", "privacy"],
  "Permissions kept to tabs, tabGroups, storage and alarms; asking for <all_urls> was rejected because it "
  "triggers the scary install warning.", key="tt-perms")
M(P, "2024-10-09 20:50", "fact", ["release-process", "firefox"],
  "Release process: `web-ext sign --channel=listed` for Firefox AMO and a zip upload to the Chrome Web Store; "
  "AMO review usually takes 1-2 days.", key="tt-release")
M(P, "2025-01-25 21:00", "decision", ["features"],
  "Tabs idle for 45 minutes are discarded with chrome.tabs.discard (not closed); pinned and audible tabs are "
  "never touched.", key="tt-discard")
M(P, "2025-04-08 19:35", "incident", ["firefox", "compatibility"],
  "Firefox does not support tabGroups; the extension feature-detects `chrome.tabGroups` and hides grouping in "
  "the popup there.", key="tt-ffgroups")
M(P, "2025-07-29 20:10", "preference", ["ui", "accessibility"],
  "User wants the popup fully keyboard navigable and checked with axe before each release.", key="tt-a11y")
M(P, "2025-11-18 21:45", "todo", ["sync"],
  "TODO: export/import of grouping rules as JSON, for moving between browsers.", key="tt-export")
M(P, "2026-04-21 20:25", "note", ["store", "policy"],
  "Chrome Web Store flagged the listing for 'excessive keywords' in the description; trimmed it and resubmitted.",
  key="tt-cws")

# ---------------------------------------------------------------------------------------------
# terrabase — infrastructure as code (Terraform / OpenTofu on AWS)
# ---------------------------------------------------------------------------------------------
P = "terrabase"
M(P, "2024-01-15 10:00", "fact", ["terraform", "toolchain"],
  "terrabase pins Terraform 1.5.7 (required_version = \"~> 1.5.7\").", key="tb-tool-1")
M(P, "2024-01-16 14:30", "note", ["architecture", "project-structure"],
  "Repository layout: modules/ holds reusable modules (vpc, rds, ecs-service), live/<env>/<component>/ holds "
  "root modules, one state per component. Separate directories per environment instead of workspaces.",
  key="tb-layout")
M(P, "2024-01-17 09:20", "fact", ["state", "aws"],
  "Remote state lives in S3 bucket tb-tfstate-prod with a DynamoDB table tf-locks for locking; versioning "
  "is on.", key="tb-state")
M(P, "2024-03-26 16:10", "decision", ["ci", "atlantis"],
  "Plans and applies happen via Atlantis on pull requests: `atlantis plan` runs automatically, apply needs an "
  "approved review.", key="tb-atlantis")
M(P, "2024-05-15 11:55", "incident", ["state", "locking"],
  "A cancelled CI job left 'Error acquiring the state lock' on live/prod/rds. Cleared with "
  "`terraform force-unlock <LOCK_ID>` after checking nobody was applying.", key="tb-lock")
M(P, "2024-07-30 15:05", "decision", ["safety", "rds"],
  "Databases and the state bucket have lifecycle { prevent_destroy = true }; removing it requires a separate PR.",
  key="tb-prevent")
M(P, "2024-09-04 10:40", "fact", ["terraform", "toolchain"],
  "terrabase moved from Terraform to OpenTofu 1.7 after the license change; state migrated without changes.",
  key="tb-tool-2")
M(P, "2024-11-06 13:20", "decision", ["tagging", "cost"],
  "Every resource gets default_tags from the provider: owner, env, cost-center, managed-by=terraform.",
  key="tb-tags")
M(P, "2025-02-26 14:45", "note", ["drift"],
  "Nightly drift detection runs `tofu plan -detailed-exitcode` per component and opens an issue on exit code 2.",
  key="tb-drift")
M(P, "2025-05-08 09:35", "decision", ["iam", "security", "ci"],
  "CI assumes an OIDC role per environment (github-actions-<env>) instead of long-lived access keys.",
  key="tb-oidc")
M(P, "2025-08-13 16:25", "incident", ["dns", "route53"],
  "An import of the legacy Route53 zone duplicated the MX records and mail bounced for 20 minutes; imports "
  "now always go through a plan review first.", key="tb-mx")
M(P, "2026-02-03 10:50", "fact", ["terraform", "toolchain"],
  "terrabase now uses OpenTofu 1.8 (for early variable evaluation in backend blocks); the .opentofu-version "
  "file pins 1.8.3.", key="tb-tool-3")
M(P, "2026-06-17 15:30", "todo", ["cost"],
  "TODO: move the NAT gateways in staging to a single shared NAT instance; they cost ~$95/month each.",
  key="tb-nat")

# ---------------------------------------------------------------------------------------------
# ledgerly — billing service (TypeScript/Node, Stripe, Postgres) with a small admin UI
# ---------------------------------------------------------------------------------------------
P = "ledgerly"
M(P, "2024-02-12 10:30", "note", ["architecture", "docs"],
  "Architecture decision records for ledgerly live in docs/adr/; the service is a modular monolith with "
  "modules billing/, invoicing/, webhooks/ and admin/, each owning its own Postgres schema.", key="lg-arch")
M(P, "2024-02-13 11:00", "fact", ["stripe", "api"],
  "ledgerly pins the Stripe API version 2023-10-16 in the client constructor.", key="lg-stripe-1")
M(P, "2024-02-28 15:20", "decision", ["money", "postgres"],
  "Money is stored as integer minor units (bigint cents) plus an ISO currency column; never floats, never "
  "numeric in JS.", key="lg-money")
M(P, "2024-03-21 14:10", "decision", ["webhooks", "idempotency"],
  "Stripe webhooks are idempotent: the event id is inserted into processed_events with a unique constraint "
  "before handling, and a duplicate insert short-circuits with 200.", key="lg-idem")
M(P, "2024-04-30 16:45", "incident", ["webhooks", "networking"],
  "Intermittent ECONNRESET when ledgerly called the tax service: Node's keep-alive socket outlived the "
  "upstream's 5 s idle timeout. Set the agent's keepAlive timeout to 4 s.", key="lg-econnreset")
M(P, "2024-06-06 13:35", "decision", ["subscriptions", "proration"],
  "Plan upgrades prorate immediately (proration_behavior=always_invoice); downgrades take effect at the end "
  "of the period.", key="lg-proration")
M(P, "2024-07-24 10:05", "fact", ["admin", "frontend"],
  "Admin UI grid uses a custom SelectEditor cell editor for the plan and status columns; it saves on blur "
  "and validates against the allowed transitions.", key="lg-selecteditor")
M(P, "2024-08-19 12:50", "fact", ["stripe", "api"],
  "ledgerly upgraded the pinned Stripe API version to 2024-06-20; the invoice.upcoming handling changed.",
  key="lg-stripe-2")
M(P, "2024-09-30 15:15", "decision", ["dunning", "payments"],
  "Dunning: Smart Retries plus our own emails on day 1, 4 and 10; the subscription is paused (not cancelled) "
  "after the last failed attempt.", key="lg-dunning")
M(P, "2024-11-27 17:30", "decision", ["rate-limiting", "api"],
  "Public API rate limit is 100 requests/min per API key, token bucket in Redis; 429 responses include "
  "X-RateLimit-Reset.", key="lg-ratelimit")
M(P, "2025-01-16 09:40", "incident", ["postgres", "concurrency"],
  "Two workers generated the same invoice number. Invoice numbering now takes pg_advisory_xact_lock(hashtext("
  "'invoice_seq:' || account_id)) inside the transaction.", key="lg-advisory")
M(P, "2025-03-11 14:25", "preference", ["code-review", "testing"],
  "User wants every billing change reviewed by two people and covered by a test that replays a recorded "
  "Stripe event fixture.", key="lg-review")
M(P, "2025-05-29 11:10", "decision", ["tax"],
  "Tax is calculated with Stripe Tax; EU reverse charge is handled by collecting VAT IDs at checkout.",
  key="lg-tax")
M(P, "2025-10-02 16:00", "fact", ["stripe", "api"],
  "ledgerly now pins the Stripe API version 2025-09-30; the upgrade moved us to the new billing mode for "
  "flexible subscriptions.", key="lg-stripe-3")
M(P, "2026-01-22 10:20", "incident", ["error-handling", "webhooks"],
  "A webhook handler swallowed a StripeInvalidRequestError and returned 200, so a failed refund was never "
  "retried. Handlers now rethrow unknown errors so Stripe retries, and log the event id.", key="lg-swallow")
M(P, "2026-09-08 13:45", "todo", ["reporting"],
  "TODO: monthly MRR/churn report job that writes to the reporting schema for the Metabase dashboard.",
  key="lg-mrr")

# ---------------------------------------------------------------------------------------------
# beltwise — Factorio mod (Lua) adding smart belt balancers
# ---------------------------------------------------------------------------------------------
P = "beltwise"
M(P, "2024-09-14 19:00", "note", ["architecture", "lua"],
  "Mod structure: data.lua/data-updates.lua define prototypes (data stage), control.lua wires event "
  "handlers, and scripts/ holds the balancer logic. All runtime state is in the global `storage` table.",
  key="bw-structure")
M(P, "2024-09-21 20:30", "decision", ["performance", "on_tick"],
  "No work in on_tick every tick: balancers are processed in slices with on_nth_tick(10), 50 entities per slice.",
  key="bw-ontick")
M(P, "2024-10-26 21:15", "incident", ["multiplayer", "desync"],
  "Multiplayer desync: the mod iterated a Lua table with pairs() over entity references created in a "
  "different order on each client. Switched to arrays keyed by unit_number.", key="bw-desync")
M(P, "2024-11-30 18:45", "decision", ["migrations"],
  "Every release that changes storage layout ships a migration script in migrations/ named "
  "<version>.lua; never rely on on_configuration_changed alone.", key="bw-migrations")
M(P, "2025-01-18 20:00", "fact", ["release-process", "mod-portal"],
  "Release process: bump info.json version, update changelog.txt in the strict Factorio format, zip as "
  "beltwise_<version>.zip and upload through the mod portal API with the upload token.", key="bw-release")
M(P, "2025-03-29 19:20", "note", ["compatibility", "space-age"],
  "Space Age compatibility: balancers must support stacked belts; the belt stack size comes from "
  "prototypes, never hard-coded.", key="bw-spaceage")
M(P, "2025-06-07 21:40", "fact", ["settings", "locale"],
  "Mod settings: beltwise-slice-size (runtime-global, default 50) and beltwise-show-overlay (per-user); "
  "names localized in locale/en/beltwise.cfg.", key="bw-settings")
M(P, "2025-09-13 20:05", "incident", ["bug", "crash"],
  "Crash report: 'LuaEntity API call when LuaEntity was invalid' when a balancer was mined mid-slice. Every "
  "stored entity is now checked with .valid before use.", key="bw-invalid")
M(P, "2026-02-28 19:30", "todo", ["features"],
  "TODO: circuit network control so a balancer can be disabled by a signal.", key="bw-circuit")
M(P, "2026-07-05 20:15", "preference", ["testing"],
  "User tests changes in a dedicated save with 200 balancers and watches the 'script update' time in the "
  "F4 debug overlay; it must stay under 0.3 ms.", key="bw-perftest")

# ---------------------------------------------------------------------------------------------
# mailroom — transactional email service (Python, Celery, Amazon SES)
# ---------------------------------------------------------------------------------------------
P = "mailroom"
M(P, "2024-03-05 10:10", "note", ["architecture", "celery"],
  "mailroom architecture: producers enqueue send requests to a Celery queue (Redis broker), workers render "
  "MJML templates and send through Amazon SES, and SNS delivers bounce/complaint events back to a webhook.",
  key="mr-arch")
M(P, "2024-03-27 15:30", "decision", ["rate limiting", "ses"],
  "Sending is rate limited to the SES quota of 14 emails/s with a Celery rate_limit on the send task; "
  "bursts queue up instead of failing.", key="mr-ratelimit")
M(P, "2024-05-21 11:45", "decision", ["error-handling", "retries"],
  "Retries: transient SES errors (Throttling, ServiceUnavailable) retry with exponential backoff and jitter, "
  "max 6 attempts; MessageRejected is permanent and goes straight to the dead-letter table.",
  key="mr-retries")
M(P, "2024-07-03 09:55", "incident", ["bounces", "deliverability"],
  "Bounce rate hit 4.8% after importing an old list and SES put the account under review. Hard bounces are "
  "now added to a suppression list immediately.", key="mr-bounce")
M(P, "2024-09-17 14:00", "fact", ["dns", "deliverability"],
  "DKIM uses Easy DKIM (3 CNAMEs), SPF includes amazonses.com, DMARC is p=quarantine with rua reports to "
  "a dedicated mailbox.", key="mr-dkim")
M(P, "2024-12-10 16:20", "incident", ["celery", "queue"],
  "Queue backlog of 80k messages: a worker pool with concurrency 4 and prefetch multiplier 16 hoarded tasks. "
  "Set worker_prefetch_multiplier = 1 and acks_late = True.", key="mr-backlog")
M(P, "2025-02-12 10:30", "decision", ["templates"],
  "Templates are MJML compiled at deploy time to HTML, with a plain-text part generated by html2text; every "
  "template has a preview fixture.", key="mr-templates")
M(P, "2025-06-02 13:15", "fact", ["deployment"],
  "Workers run on ECS Fargate, autoscaled on queue depth via a custom CloudWatch metric (target 500 messages "
  "per task).", key="mr-ecs")
M(P, "2025-11-25 09:40", "preference", ["logging", "privacy"],
  "User wants recipient addresses masked in logs (j***@example.com); full addresses only in the audit table.",
  key="mr-mask")
M(P, "2026-04-14 11:25", "todo", ["observability"],
  "TODO: per-template open/click dashboards; the tracking pixel is already in place but not aggregated.",
  key="mr-dash")

# ---------------------------------------------------------------------------------------------
# pollster — Slack bot for quick polls (Bolt for Python)
# ---------------------------------------------------------------------------------------------
P = "pollster"
M(P, "2024-10-03 18:30", "note", ["architecture", "slack"],
  "pollster is built on Bolt for Python in Socket Mode, so it needs no public URL; the /poll slash command "
  "opens a modal and votes arrive as block_actions.", key="pb-arch")
M(P, "2024-10-04 19:00", "fact", ["storage", "sqlite"],
  "Votes are stored in SQLite (polls.db) with one row per (poll_id, user_id), so re-voting just updates the row.",
  key="pb-sqlite")
M(P, "2024-11-15 17:45", "incident", ["rate limiting", "slack-api"],
  "Updating the poll message on every vote hit Slack's chat.update rate limit (HTTP 429, Retry-After). Updates "
  "are now debounced to at most one per second per poll.", key="pb-429")
M(P, "2025-01-28 18:20", "decision", ["features"],
  "Anonymous polls store only a salted hash of the user id; results show counts but never names.",
  key="pb-anon")
M(P, "2025-04-24 17:10", "fact", ["storage", "postgres"],
  "pollster moved from SQLite to Postgres (the shared db on the homelab) once three workspaces installed it.",
  key="pb-pg")
M(P, "2025-08-05 18:55", "fact", ["deployment", "docker"],
  "Deployed as a single Docker container on the homelab Proxmox node; tokens SLACK_BOT_TOKEN and "
  "SLACK_APP_TOKEN come from a .env file readable only by root.", key="pb-deploy")
M(P, "2026-03-19 17:35", "todo", ["features"],
  "TODO: scheduled polls that close automatically and post the results to the channel.", key="pb-schedule")
M(P, "2024-10-06 20:10", "decision", ["project-structure", "python"],
  "Code layout: app.py wires the Bolt app, handlers/ has one module per interaction (commands, actions, "
  "views) and blocks.py builds all Block Kit JSON, so handlers never assemble blocks inline.", key="pb-layout")
M(P, "2025-02-20 19:40", "preference", ["ux"],
  "User wants poll results rendered as bar charts made of emoji blocks, sorted by votes, with the total at the end.",
  key="pb-bars")
M(P, "2025-10-09 18:05", "incident", ["slack-api", "auth"],
  "After reinstalling the app in a workspace the bot failed with invalid_auth; the old xoxb token was still "
  "cached in the installation store. Now the store is keyed by team_id and overwritten on reinstall.",
  key="pb-invalidauth")
M(P, "2026-06-30 17:50", "decision", ["i18n"],
  "Messages use the user's Slack locale when available; German and English only for now.", key="pb-locale")

# ---------------------------------------------------------------------------------------------
# Extra memories, added per project (later sessions)
# ---------------------------------------------------------------------------------------------
P = "cachekit"
M(P, "2024-11-19 10:40", "incident", ["redis", "error-handling"],
  "Redis backend raised ConnectionError straight to callers during a failover. Added fail_open=True option: "
  "on backend errors get() returns a miss and logs a warning instead of breaking the request.", key="ck-failopen")
M(P, "2026-05-14 15:10", "note", ["architecture", "backends"],
  "Module layout for the new sqlite backend: cachekit/backends/sqlite.py with WAL mode and a background "
  "expiry sweep every 60 s; same Backend protocol as the others.", key="ck-sqlite")

P = "litesearch"
M(P, "2024-09-22 13:40", "note", ["architecture", "api"],
  "Codebase note: the HTTP server is a thin layer; all search logic goes through litesearch.engine.Engine so "
  "the CLI and the API behave identically.", key="ls-engine")

P = "brookflow"
M(P, "2025-12-02 09:20", "note", ["architecture", "dagster"],
  "Each source in brookflow is a Dagster asset group with its own daily partition definition; dbt models "
  "are loaded as assets through dagster-dbt so lineage is visible end to end.", key="bf-assets")
M(P, "2026-09-24 14:05", "incident", ["schedule", "alerting"],
  "Nightly run silently skipped two days: the schedule was stopped during a deploy and nobody noticed. Added "
  "a freshness alert that fires when fct_orders is more than 30 hours old.", key="bf-skipped")

P = "pantrypal"
M(P, "2025-11-06 20:15", "note", ["backend", "architecture", "postgres"],
  "The pantrypal backend is a small Express app (api/) with Postgres via Drizzle; it only handles accounts, "
  "household sharing and the product lookup proxy.", key="pp-backend")
M(P, "2026-10-02 19:05", "incident", ["android", "release-process"],
  "Play Console rejected the 3.0 upload: targetSdkVersion had to be 35. Bumped it in app.json "
  "(expo-build-properties) and re-ran the EAS build.", key="pp-targetsdk")

P = "homelab"
M(P, "2024-10-12 17:20", "decision", ["certificates", "tls", "reverse-proxy"],
  "Internal services get certificates from Caddy using the Cloudflare DNS challenge for *.lab.mkdev.net, so "
  "nothing internal needs to be exposed for issuance.", key="hl-caddy")
M(P, "2025-11-29 12:45", "incident", ["power", "zfs"],
  "Power cut longer than the UPS runtime: NUT shut Proxmox down cleanly, but TrueNAS came back with the pool "
  "degraded until a disk was reseated.", key="hl-powercut")

P = "inkwell"
M(P, "2024-09-07 15:30", "note", ["project-structure", "hugo"],
  "Site structure: content/posts/<year>/<slug>/index.md page bundles so images sit next to the post; "
  "taxonomies are tags and series.", key="ink-structure")
M(P, "2025-10-18 11:40", "decision", ["domain", "dns"],
  "The blog's domain blog.mkdev.net is on Cloudflare DNS with a CNAME to the Pages project; HSTS enabled "
  "with preload.", key="ink-domain")

P = "loomtrain"
M(P, "2025-10-07 14:35", "decision", ["data", "tokenizer"],
  "Trained our own 32k BPE tokenizer with the tokenizers library on a 5 GB sample; vocabulary frozen at "
  "v2 so old checkpoints stay comparable.", key="lt-tokenizer")
M(P, "2026-07-22 10:15", "incident", ["gpu", "hardware"],
  "Runs on the 4090 crashed with Xid 79 ('GPU has fallen off the bus'); the 12VHPWR connector was not fully "
  "seated. Reseated and capped power at 400 W with nvidia-smi -pl 400.", key="lt-xid")

P = "dotsync"
M(P, "2025-12-14 21:05", "incident", ["ci", "release-process"],
  "goreleaser failed on the v1.8.0 tag with 'git is in a dirty state' because go generate modified a file in "
  "CI. The generate step now runs before checkout verification and is committed.", key="ds-dirty")

P = "ferrox"
M(P, "2026-10-11 09:30", "note", ["architecture", "cache"],
  "The thumbnail cache index moved from an in-memory LRU to a redb file so a restart doesn't lose the index; "
  "eviction still by last access.", key="fx-redb")

P = "tabtamer"
M(P, "2024-12-02 20:40", "decision", ["project-structure", "build"],
  "Build setup: Vite with @crxjs/vite-plugin, src/background/, src/popup/ and src/shared/; one manifest "
  "template produces both the Chrome and the Firefox build.", key="tt-build")
M(P, "2026-09-30 21:20", "incident", ["service-worker", "bug"],
  "Discard timer stopped after a browser update: chrome.alarms with periodInMinutes below 0.5 are ignored now. "
  "Period set to 1 minute.", key="tt-alarms")

P = "terrabase"
M(P, "2025-11-20 15:50", "decision", ["modules", "versioning"],
  "Internal modules are consumed with git tags (?ref=vpc-v2.3.0) instead of relative paths, so live/ can pin "
  "module versions per environment.", key="tb-modver")

P = "ledgerly"
M(P, "2024-05-16 11:25", "note", ["project-structure", "typescript"],
  "Folder conventions: each module has domain/, infra/ and http/ subfolders; domain code must not import "
  "from infra (checked by dependency-cruiser).", key="lg-folders")
M(P, "2026-04-28 15:40", "decision", ["release-process", "deployment"],
  "ledgerly deploys are blue-green on ECS; database migrations run as a separate one-off task before the "
  "switch and must be backwards compatible.", key="lg-deploy")

P = "beltwise"
M(P, "2024-12-21 20:25", "fact", ["compatibility"],
  "Known conflict with Krastorio 2's loaders: they replace the belt prototypes we read; beltwise now reads "
  "speeds at runtime from game.entity_prototypes.", key="bw-k2")
M(P, "2026-10-15 19:55", "note", ["release-process", "changelog"],
  "The mod portal rejects changelog.txt entries whose 'Date:' line is not in YYYY-MM-DD; the release "
  "script validates it before upload.", key="bw-changelogdate")

P = "mailroom"
M(P, "2025-08-26 10:05", "incident", ["ses", "quota"],
  "Sends failed with 'Maximum sending rate exceeded' after a marketing blast reused the transactional "
  "account; marketing now has its own SES configuration set and IP pool.", key="mr-maxrate")
M(P, "2026-08-12 12:30", "decision", ["project-structure", "python"],
  "Package layout: mailroom/api (FastAPI intake), mailroom/tasks (Celery), mailroom/templates; shared "
  "settings in mailroom/config.py via pydantic-settings.", key="mr-layout")

P = "rathole"
M(P, "2025-10-25 16:40", "note", ["config", "ports"],
  "Added a service for the Jellyfin server: bind_addr 0.0.0.0:8920 on the VPS, local_addr 192.168.1.20:8096, "
  "noise transport; opened 8920 in ufw.", key="rh-jellyfin")
M(P, "2026-02-21 10:05", "decision", ["security", "firewall"],
  "Control port 2333 on the VPS is now restricted in ufw to the home IPv6 prefix plus the CGNAT range's "
  "egress IP; random scanners were hammering the handshake.", key="rh-restrict")

# ---------------------------------------------------------------------------------------------
# The user themselves (no project)
# ---------------------------------------------------------------------------------------------
P = None
M(P, "2024-01-05 09:00", "preference", ["editor", "tooling"],
  "User's main editor is VS Code with the Vim extension.", key="u-editor-1")
M(P, "2024-01-05 09:05", "fact", ["timezone"],
  "User is based in Berlin (Europe/Berlin) and usually works 9:00-18:00 local time; schedule anything "
  "user-facing with that in mind.", key="u-tz")
M(P, "2024-01-12 14:40", "preference", ["communication"],
  "User prefers short answers: code first, explanation after, no recap of what they just said.", key="u-concise")
M(P, "2024-02-01 10:20", "preference", ["git", "commits"],
  "Commit messages follow Conventional Commits (feat:, fix:, chore:) with an imperative subject under 72 "
  "characters.", key="u-commits")
M(P, "2024-02-18 16:00", "preference", ["git", "hooks"],
  "Never suggest `git commit --no-verify`; if the pre-commit hook fails, fix what it complains about.",
  key="u-noverify")
M(P, "2024-03-22 11:35", "preference", ["python", "tooling"],
  "For Python the user uses uv for environments and dependencies, ruff for lint + format, and pytest (never "
  "unittest-style classes).", key="u-python")
M(P, "2024-05-01 08:50", "fact", ["hardware", "os"],
  "Machines: a MacBook Pro M3 for travel and an Arch Linux desktop (Ryzen 9 7950X) as the main workstation.",
  key="u-machines")
M(P, "2024-06-12 19:15", "preference", ["shell", "tooling"],
  "Shell is zsh with starship; user likes small shell functions over aliases and keeps dotfiles in dotsync.",
  key="u-shell")
M(P, "2024-08-20 13:00", "preference", ["code-review"],
  "In code review the user wants small PRs (under ~400 changed lines) and comments phrased as questions, "
  "with blocking issues marked 'blocking:'.", key="u-review")
M(P, "2024-11-02 10:10", "preference", ["secrets", "security"],
  "Secrets go into pass (GPG-backed) or the cloud's secret manager, never into .env files committed to a repo.",
  key="u-secrets")
M(P, "2025-01-07 12:25", "preference", ["error-handling"],
  "User dislikes catch-all exception handlers; errors should be handled where there is something useful to "
  "do, otherwise propagated with context.", key="u-errors")
M(P, "2025-03-04 09:30", "preference", ["editor", "tooling"],
  "User switched from VS Code to Neovim (LazyVim distribution) as main editor.", key="u-editor-2")
M(P, "2025-05-13 17:45", "preference", ["docs", "writing"],
  "Docs and READMEs in English, with a runnable quick start at the top; user hates READMEs that start with badges.",
  key="u-docs")
M(P, "2025-09-15 08:40", "fact", ["work", "schedule"],
  "User works on side projects mostly on Tuesday and Thursday evenings and Saturday mornings.", key="u-slots")
M(P, "2026-01-20 10:00", "preference", ["ci", "tooling"],
  "User wants CI to fail on warnings (ruff, clippy -D warnings, tsc --noEmit strict) rather than collecting them.",
  key="u-ci")
M(P, "2026-04-09 09:15", "preference", ["editor", "tooling"],
  "User now uses Helix as main editor; Neovim config is archived. Suggest Helix keybindings when relevant.",
  key="u-editor-3")
M(P, "2026-08-18 18:30", "preference", ["ai", "communication"],
  "When unsure about a fact from an earlier session, say so and ask rather than guessing; the user prefers "
  "'I don't remember' over a confident wrong answer.", key="u-uncertain")

P = "inkwell"
M(P, "2024-05-19 10:30", "decision", ["syntax-highlighting", "hugo"],
  "Code blocks use Hugo's built-in Chroma highlighter with noClasses = false and a generated CSS file, so the "
  "colours follow the light/dark theme switch.", key="ink-chroma")
M(P, "2025-12-06 09:50", "todo", ["newsletter"],
  "TODO: email newsletter via Buttondown fed from the RSS feed, weekly digest only; no popups on the site.",
  key="ink-newsletter")

P = "tabtamer"
M(P, "2024-07-02 21:10", "preference", ["privacy", "telemetry"],
  "No telemetry of any kind in the extension; user rejected even anonymous usage counts. Bug reports come "
  "through GitHub issues only.", key="tt-telemetry")
M(P, "2025-05-20 20:35", "decision", ["testing"],
  "Unit tests run with vitest and a hand-written fake of the chrome.* APIs in src/shared/testing/; no "
  "browser needed for the rule engine tests.", key="tt-tests")

P = "beltwise"
M(P, "2025-11-08 19:45", "decision", ["graphics"],
  "Balancer sprites are drawn at 128 px (high-res only, since 2.0 dropped normal-res graphics) and shipped as "
  "PNGs compressed with oxipng.", key="bw-sprites")

P = "mailroom"
M(P, "2024-02-29 09:15", "decision", ["deliverability", "unsubscribe"],
  "Every non-transactional message carries List-Unsubscribe and List-Unsubscribe-Post (one-click) headers; "
  "Gmail and Yahoo require them for bulk senders since February 2024.", key="mr-unsub")
M(P, "2025-04-15 14:50", "decision", ["idempotency", "api"],
  "The intake API requires an Idempotency-Key header; a repeated key within 24 h returns the original "
  "message id instead of sending twice.", key="mr-idemkey")

P = "pollster"
M(P, "2025-06-21 18:10", "decision", ["testing"],
  "Handlers are tested with pytest by calling them with a fake ack/respond and a recorded block_actions "
  "payload; no live Slack workspace in CI.", key="pb-tests")

P = "mailroom"
M(P, "2025-03-18 09:05", "fact", ["rate limiting", "ses"],
  "AWS raised the mailroom SES sending quota to 50 emails/s; the Celery rate_limit on the send task was "
  "bumped to match.", key="mr-quota-2")

P = "dotsync"
M(P, "2026-09-10 20:30", "fact", ["go", "toolchain"],
  "dotsync now targets Go 1.25 (go.mod: go 1.25.0) to drop the x/exp slices dependency; CI still tests the "
  "two latest Go releases.", key="ds-go-4")


# =============================================================================================
# Queries. Each: (kind, text, {memory_key: grade}). Grade 2 = the single best answer, 1 = relevant.
# Tag queries are judged mechanically below: every memory carrying the tag (hyphen/underscore/space
# variants count as the same tag) is relevant.
# =============================================================================================
Q: list[tuple[str, str, dict[str, int] | None]] = []


def q(kind, text, rels=None):
    Q.append((kind, text, rels))


# --- project-generic: project name + generic words. The right memories often lack the project name
#     in their text (only in the tag), while other projects' memories use the generic words. ---------
q("project-generic", "rathole project codebase architecture",
  {"rh-arch": 2, "rh-transport": 1, "rh-config": 1})
q("project-generic", "rathole project configuration details",
  {"rh-config": 2, "rh-bind": 1, "rh-heartbeat": 1, "rh-jellyfin": 1, "rh-token": 1,
   "rh-transport": 1, "rh-ipv6": 1})
q("project-generic", "rathole project overview and design",
  {"rh-arch": 2, "rh-transport": 1, "rh-cgnat": 1, "rh-config": 1})
q("project-generic", "cachekit architecture decisions",
  {"ck-adr": 2, "ck-arch": 1, "ck-pickle": 1, "ck-async": 1, "ck-lru": 1, "ck-stampede": 1,
   "ck-invalidate": 1, "ck-sqlite": 1, "ck-layout": 1})
q("project-generic", "litesearch project structure overview",
  {"ls-structure": 2, "ls-layers": 1, "ls-engine": 1})
q("project-generic", "ferrox service internals",
  {"fx-arch": 2, "fx-redb": 1})
q("project-generic", "tabtamer how it works",
  {"tt-how": 2, "tt-sw": 1, "tt-build": 1, "tt-discard": 1})
q("project-generic", "beltwise mod code organization",
  {"bw-structure": 2, "bw-migrations": 1})
q("project-generic", "dotsync tool design",
  {"ds-design": 2, "ds-symlink": 1, "ds-dryrun": 1})
q("project-generic", "pantrypal app architecture",
  {"pp-structure": 2, "pp-backend": 1, "pp-offline": 1, "pp-notif": 1})
q("project-generic", "brookflow codebase layout",
  {"bf-arch": 2, "bf-assets": 1})
q("project-generic", "loomtrain repository layout",
  {"lt-layout": 2})
q("project-generic", "terrabase repo structure",
  {"tb-layout": 2, "tb-modver": 1})
q("project-generic", "pollster code layout",
  {"pb-layout": 2, "pb-arch": 1})
q("project-generic", "inkwell site structure",
  {"ink-structure": 2, "ink-theme": 1})
q("project-generic", "ledgerly architecture decisions",
  {"lg-arch": 2, "lg-folders": 1, "lg-money": 1, "lg-idem": 1, "lg-proration": 1,
   "lg-deploy": 1, "lg-ratelimit": 1})

# --- paraphrase: no content word (or stem) shared with the relevant memories ------------------------
q("paraphrase", "who relaunches the tunnel daemon when it crashes",
  {"rh-systemd": 2})
q("paraphrase", "why is my residential line unreachable from the internet",
  {"rh-cgnat": 2})
q("paraphrase", "browser warned about an outdated HTTPS credential although a fresh one had been fetched",
  {"rh-renew": 2})
q("paraphrase", "people on our blocky survival world get kicked out periodically",
  {"rh-econnreset": 2, "rh-heartbeat": 1})
q("paraphrase", "which encoding format converts stored values to bytes, and is python's unsafe marshalling "
  "module permitted",
  {"ck-pickle": 2})
q("paraphrase", "how do clients scroll through long result lists from the query endpoint",
  {"ls-page": 2})
q("paraphrase", "the model training crashed because the graphics card ran out of RAM, what got it to fit",
  {"lt-oom": 2})
q("paraphrase", "which hard drive failed in the storage server and how long did rebuilding the array take",
  {"hl-scrub": 2})
q("paraphrase", "why did Amazon nearly suspend our outgoing mail, and what happens to undeliverable addresses",
  {"mr-bounce": 2})
q("paraphrase", "what happens when my shell rc changed on this machine and a newer copy arrives from the other computer",
  {"ds-conflict": 2})
q("paraphrase", "the extension's background script gets terminated when inactive, so where is data held between wakeups",
  {"tt-sw": 2})
q("paraphrase", "thumbnail server's resident footprint ballooned over hours, what was the culprit",
  {"fx-leak": 2})
q("paraphrase", "how do we avoid charging twice when the payment provider delivers the same notification again",
  {"lg-idem": 2})
q("paraphrase", "why did co-op games fall out of step between players' computers",
  {"bw-desync": 2})
q("paraphrase", "how verbose should replies to this person be",
  {"u-concise": 2})

# --- identifier: exact identifiers as they appear in memories ---------------------------------------
q("identifier", "ERR_TLS_CERT_ALTNAME_INVALID", {"rh-altname": 1, "pp-altname": 1})
q("identifier", "ECONNRESET", {"rh-econnreset": 1, "lg-econnreset": 1})
q("identifier", "E0502", {"fx-e0502": 2})
q("identifier", "--no-verify", {"ds-noverify": 1, "u-noverify": 1})
q("identifier", "--bind-addr flag", {"ls-bindaddr": 2})
q("identifier", "heartbeat_interval", {"rh-heartbeat": 2})
q("identifier", "max_connections", {"ck-maxconn": 1, "bf-pg": 1})
q("identifier", "SelectEditor", {"lg-selecteditor": 2})
q("identifier", "add_filter", {"ls-filter": 2})
q("identifier", "page_size limit", {"ls-page": 2})
q("identifier", "QUOTA_BYTES_PER_ITEM", {"tt-quota": 2})
q("identifier", "default_ttl", {"ck-ttl-3": 2, "ck-ttl-2": 1, "ck-ttl-1": 1})
q("identifier", "pg_advisory_xact_lock", {"lg-advisory": 2})
q("identifier", "worker_prefetch_multiplier", {"mr-backlog": 2})
q("identifier", "vips_cache_set_max", {"fx-leak": 2})

# --- current: only the newest memory of a superseding chain is relevant -----------------------------
q("current", "what is the current litesearch staging server", {"ls-stg-3": 2})
q("current", "what is the current public IP of the rathole server", {"rh-vps-3": 2})
q("current", "what is the current default TTL in cachekit", {"ck-ttl-3": 2})
q("current", "what time does the nightly brookflow run start now", {"bf-sched-3": 2})
q("current", "current minimum iOS version for pantrypal", {"pp-ios-3": 2})
q("current", "where do the homelab NAS backups go now", {"hl-bk-3": 2})
q("current", "where is the inkwell blog hosted currently", {"ink-host-3": 2})
q("current", "which GPU does loomtrain train on now", {"lt-gpu-3": 2})
q("current", "what Go version does dotsync target currently", {"ds-go-4": 2})
q("current", "what is the current SES sending rate for mailroom", {"mr-quota-2": 2})
q("current", "what is the current ferrox MSRV", {"fx-msrv-3": 2})
q("current", "which Terraform or OpenTofu version does terrabase use now", {"tb-tool-3": 2})
q("current", "current Stripe API version pinned in ledgerly", {"lg-stripe-3": 2})
q("current", "what is the user's current main editor", {"u-editor-3": 2})

# --- tag: bare tag queries, judged mechanically ----------------------------------------------------
for tag in ("tls", "systemd", "release-process", "rate limiting", "postgres", "code-review",
            "error-handling", "ci", "gpu", "webhooks"):
    q("tag", tag, None)

# --- general: other natural questions ---------------------------------------------------------------
q("general", "how should commit messages be written for this user", {"u-commits": 2})
q("general", "when were the tunnel tokens rotated and why", {"rh-rotate": 2})
q("general", "where are secrets and credentials kept",
  {"u-secrets": 2, "rh-token": 1, "pb-deploy": 1, "tb-oidc": 1, "ck-release": 1})
q("general", "what Python tooling does the user prefer", {"u-python": 2})
q("general", "which services are exposed through the VPS and on which ports",
  {"rh-ports": 2, "rh-jellyfin": 1, "rh-ssh": 1, "rh-bind": 1, "rh-restrict": 1, "rh-udp": 1,
   "rh-ipv6": 1})
q("general", "how are database migrations handled during deploys", {"lg-deploy": 2})
q("general", "what happened during the power outage", {"hl-powercut": 2, "hl-ups": 1})
q("general", "what time zone is the user in", {"u-tz": 2})
q("general", "how do we prevent cache stampedes", {"ck-stampede": 2})


# =============================================================================================
# Build
# =============================================================================================
def norm_tag(tag: str) -> str:
    return re.sub(r"[\s_\-]+", " ", tag.strip().lower())


def build():
    mems = sorted(MEMS, key=lambda m: (m["when"], m["key"]))
    key_to_id = {}
    records = []
    for i, m in enumerate(mems, start=1):
        mid = f"mem-{i:04d}"
        key_to_id[m["key"]] = mid
        created = datetime.strptime(m["when"], "%Y-%m-%d %H:%M").replace(tzinfo=timezone.utc)
        records.append({"id": mid, "content": m["content"], "tags": m["tags"],
                        "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "memory_type": m["memory_type"], "metadata": m["metadata"]})

    queries, qrels = [], []
    for n, (kind, text, rels) in enumerate(Q, start=1):
        qid = f"q{n:03d}"
        queries.append({"_id": qid, "text": text, "metadata": {"kind": kind}})
        if rels is None:  # tag query
            rels = {m["key"]: 1 for m in mems if norm_tag(text) in {norm_tag(t) for t in m["tags"]}}
        for key, grade in rels.items():
            if key not in key_to_id:
                raise SystemExit(f"{qid}: unknown memory key {key!r}")
            qrels.append((qid, key_to_id[key], grade))

    with (OUT / "memories.jsonl").open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    with (OUT / "queries.jsonl").open("w", encoding="utf-8") as f:
        for r in queries:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    with (OUT / "qrels-test.tsv").open("w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, mid, grade in qrels:
            f.write(f"{qid}\t{mid}\t{grade}\n")
    (OUT / "eval.json").write_text(json.dumps(
        {"now": NOW, "corpus": "memories.jsonl", "queries": "queries.jsonl", "qrels": "qrels-test.tsv"},
        indent=2) + "\n", encoding="utf-8")
    return key_to_id


# =============================================================================================
# Validation (re-reads the written files)
# =============================================================================================
STOP = set("""a an the and or of to in on for with by at from as is are was were be been being it its this
that these those what which who whom how why when where does do did done can could should would will
we our us you your i my me he she they them their there here not no nor so if then than too very just
about after before over under between into out up down again also only own same such each both any all
few more most other some get got has have had having new now one two""".split())


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP and len(w) > 1}


def shares_stem(a: str, b: str) -> bool:
    if a == b:
        return True
    k = 5 if min(len(a), len(b)) >= 5 else min(len(a), len(b))
    return k >= 4 and a[:k] == b[:k]


def validate(key_to_id) -> dict:
    mems = [json.loads(l) for l in (OUT / "memories.jsonl").open(encoding="utf-8")]
    queries = [json.loads(l) for l in (OUT / "queries.jsonl").open(encoding="utf-8")]
    lines = (OUT / "qrels-test.tsv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "query-id\tcorpus-id\tscore", lines[0]
    qrels = defaultdict(dict)
    for line in lines[1:]:
        qid, mid, s = line.split("\t")
        assert mid not in qrels[qid], f"duplicate judgement {qid} {mid}"
        qrels[qid][mid] = int(s)
    ids = [m["id"] for m in mems]
    assert len(ids) == len(set(ids)), "duplicate memory ids"
    qids = [x["_id"] for x in queries]
    assert len(qids) == len(set(qids)), "duplicate query ids"
    by_id = {m["id"]: m for m in mems}
    for m in mems:
        d = datetime.strptime(m["created_at"], "%Y-%m-%dT%H:%M:%SZ")
        assert datetime(2024, 1, 1) <= d <= datetime(2026, 10, 31, 23, 59), m["id"]
        assert m["tags"] == [t.lower() for t in m["tags"]] and m["tags"], m["id"]
        assert 1 <= len(m["tags"]) <= 5, m["id"]
        if "project" in m["metadata"]:
            assert m["metadata"]["project"] in m["tags"], m["id"]
        assert len(set(m["content"].lower().split())) > 5, m["id"]
    contents = [m["content"] for m in mems]
    assert len(contents) == len(set(contents)), "duplicate content"
    for qid in qids:
        assert qrels.get(qid), f"{qid} has no judgements"
        for mid in qrels[qid]:
            assert mid in by_id, f"{qid}: unknown memory {mid}"
    assert set(qrels) <= set(qids)
    for qid, rels in qrels.items():
        assert sum(1 for s in rels.values() if s == 2) <= 1, f"{qid}: more than one grade-2 answer"

    kinds = Counter(x["metadata"]["kind"] for x in queries)
    projects = Counter(m["metadata"]["project"] for m in mems if "project" in m["metadata"])
    user = sum(1 for m in mems if "project" not in m["metadata"])
    problems = []
    for k in ("project-generic", "paraphrase", "identifier", "current"):
        if kinds[k] < 10:
            problems.append(f"only {kinds[k]} {k} queries")
    if kinds["tag"] < 8:
        problems.append("fewer than 8 tag queries")
    if len(mems) < 270:
        problems.append(f"only {len(mems)} memories")
    if len(queries) < 70:
        problems.append(f"only {len(queries)} queries")
    if len(projects) < 16:
        problems.append(f"only {len(projects)} projects")
    for p, n in projects.items():
        if not 10 <= n <= 25:
            problems.append(f"project {p} has {n} memories")

    # paraphrase queries must not share a content word (or 5-char stem) with their relevant memories
    for x in queries:
        if x["metadata"]["kind"] != "paraphrase":
            continue
        qw = content_words(x["text"])
        for mid in qrels[x["_id"]]:
            mw = content_words(by_id[mid]["content"])
            shared = sorted({a for a in qw for b in mw if shares_stem(a, b)})
            if shared:
                problems.append(f"{x['_id']} shares {shared} with {mid}")
    # rathole memories should mostly not name the project in their text
    rh = [m for m in mems if m["metadata"].get("project") == "rathole"]
    named = sum("rathole" in m["content"].lower() for m in rh)
    if named * 3 > len(rh):
        problems.append(f"{named}/{len(rh)} rathole memories name the project")
    # current queries: exactly one relevant memory, and it must be the newest of its chain
    for x in queries:
        if x["metadata"]["kind"] == "current":
            assert len(qrels[x["_id"]]) == 1, x["_id"]

    stats = {
        "memories": len(mems), "projects": len(projects), "project_memories": dict(sorted(projects.items())),
        "user_memories": user,
        "memory_types": dict(sorted(Counter(m["memory_type"] for m in mems).items())),
        "date_range": [min(m["created_at"] for m in mems), max(m["created_at"] for m in mems)],
        "rathole_memories_naming_project": f"{named}/{len(rh)}",
        "queries": len(queries), "queries_per_kind": dict(sorted(kinds.items())),
        "judgements": sum(len(v) for v in qrels.values()),
        "grade2_judgements": sum(1 for v in qrels.values() for s in v.values() if s == 2),
        "judgements_per_kind": dict(sorted(Counter(
            kinds_k for x in queries for kinds_k in [x["metadata"]["kind"]] * len(qrels[x["_id"]])).items())),
    }
    return stats, problems


if __name__ == "__main__":
    key_to_id = build()
    stats, problems = validate(key_to_id)
    print(json.dumps(stats, indent=2))
    if problems:
        print("PROBLEMS:", *problems, sep="\n  ")
        sys.exit(1)
    print("OK")
