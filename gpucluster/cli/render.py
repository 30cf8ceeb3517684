"""`gpucluster render --stack FILE --out DIR`: each bare-metal machine's install seed, in a folder
per management MAC that a PXE/HTTP server serves (gpucluster/seeds.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpucluster.errors import EXIT_OK
from gpucluster.seeds import write_seeds
from gpucluster.spec import load_spec


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "render", help="write each bare-metal machine's install seed, by MAC, for a PXE/HTTP server",
        description="Render the bare-metal target's cloud-init or autoinstall data for every declared machine "
                    "into DIR/<mac as aa-bb-cc-dd-ee-ff>/ (user-data, meta-data, vendor-data, network-config) and "
                    "DIR/index.json. A boot entry names the folder: "
                    "ds=nocloud-net;s=http://SERVER/PATH/${net0/mac:hexhyp}/. Rerunning changes nothing.",
        epilog="example: gpucluster render --stack Pulumi.onprem-h100-ib.yaml --out /srv/www/seeds")
    p.add_argument("--stack", required=True, metavar="STACK_FILE", help="a bare-metal Pulumi.<stack>.yaml")
    p.add_argument("--out", required=True, metavar="DIR", help="the folder the web server serves")
    p.set_defaults(func=_render)


def _render(args: argparse.Namespace) -> int:
    out = Path(args.out)
    seeds, changed = write_seeds(load_spec(args.stack), out)
    for seed in seeds:
        print(f"{seed.node:<16} {seed.mac}  {out / seed.folder}/")
    print(f"render: {len(seeds)} machine(s), {len(changed)} file(s) written"
          + ("" if changed else " (nothing changed)"))
    return EXIT_OK
