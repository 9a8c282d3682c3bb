#!/usr/bin/python3
"""resync_parse.py - the peer side of bench_proto (our driver, not resync's
code): parses bench_proto's generated documents with the Python reference
implementation, resync, from a checkout given with --resync, and prints
"parse SECONDS ENTRIES BYTES" per repetition and "maxrss KB" at the end, for
bench_proto to read. It only calls resync's own public classes, the way
resync's client (resync-sync) reads a Source's Resource List.

Modes:
  none        import resync and stop (the interpreter's own floor)
  list        ResourceList().read(FILE) on a Resource List
  tree-read   ResourceList(mapper).read(INDEX): resync's index walk, which
              reads every part and keeps every entry (a baseline sync does)
  tree-parts  the index with index_only=True, then each part parsed into a
              fresh ResourceList and dropped: the least memory resync's API
              allows for the same walk
"""

import argparse
import os
import platform
import resource
import sys
import time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--resync", required=True,
                    help="path of a checkout of resync/resync")
    ap.add_argument("--mode", required=True,
                    choices=["none", "list", "tree-read", "tree-parts"])
    ap.add_argument("--file", required=True,
                    help="the Resource List, or the index for tree-*")
    ap.add_argument("--map", default="",
                    help="URL=DIR: where the index's part URLs are on disk")
    ap.add_argument("--reps", type=int, default=1)
    return ap.parse_args()


def main():
    args = parse_args()
    # The checkout comes first, so an installed resync cannot shadow it.
    sys.path.insert(0, os.path.abspath(args.resync))
    import resync
    from resync.mapper import Mapper
    from resync.resource_list import ResourceList

    print("version resync %s, Python %s" % (resync.__version__,
                                            platform.python_version()))
    mapper = Mapper([args.map]) if args.map else None

    def parse_list():
        rl = ResourceList()
        rl.read(uri=args.file)
        return len(rl), os.path.getsize(args.file)

    def parse_tree_read():
        rl = ResourceList(mapper=mapper)
        rl.read(uri=args.file)
        # resync sums each file's Content-Length (the file size for file:).
        return len(rl), rl.bytes_read

    def parse_tree_parts():
        index = ResourceList(mapper=mapper)
        index.read(uri=args.file, index_only=True)
        n, nbytes = 0, os.path.getsize(args.file)
        for uri in sorted(index.resources.uris()):
            path = mapper.src_to_dst(uri)
            part = ResourceList()
            part.parse(uri=path)
            n += len(part)
            nbytes += os.path.getsize(path)
        return n, nbytes

    run = {"list": parse_list, "tree-read": parse_tree_read,
           "tree-parts": parse_tree_parts}.get(args.mode)
    for _ in range(args.reps if run else 0):
        t0 = time.perf_counter()
        n, nbytes = run()
        t = time.perf_counter() - t0
        print("parse %.9f %d %d" % (t, n, nbytes), flush=True)
    print("maxrss %d" % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return 0


if __name__ == "__main__":
    sys.exit(main())
