#!/bin/bash
# A newcomer's walk through the README's first screen, on a fresh clone whose `make test` made .venv.
set -euo pipefail
REPO=$1
W=$(mktemp -d)
mkdir -p $W/notes/vpn $W/notes/cooking
cat > $W/notes/vpn/wireguard.md <<'MD'
# WireGuard on the home router

## Setup
I set up the VPN with WireGuard on the OpenWrt router: one peer per laptop, keys in /etc/wireguard.

## Keepalive
PersistentKeepalive = 25 keeps the tunnel open behind the mobile carrier's NAT.
MD
cat > $W/notes/cooking/bread.md <<'MD'
# Sourdough

Feed the starter the evening before; bake at 250 °C with steam for the first 20 minutes.
MD
cd $REPO && source .venv/bin/activate
time hybridlab index $W/notes --index $W/idx
hybridlab search "how did I set up the VPN" --index $W/idx --limit 5
hybridlab search "wireguard keepalive" --index $W/idx --explain --limit 2
python - "$W" <<'PY'
import asyncio, json, shutil, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
W = sys.argv[1]
# the README's client config, as a client would start it
params = StdioServerParameters(command=shutil.which("hybridlab"), args=["mcp", "--index", f"{W}/memory-index"],
                               env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
async def main():
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            tools = [t.name for t in (await s.list_tools()).tools]
            print("tools:", tools)
            out = await s.call_tool("store_memory", {"content": "The staging database moved to db2.internal on port 5433.", "tags": ["staging", "database"]})
            print("store_memory:", out.is_error, out.content[0].text[:200])
            out = await s.call_tool("search", {"query": "where is the staging database now"})
            print("search:", out.is_error, out.content[0].text[:300])
asyncio.run(main())
PY
