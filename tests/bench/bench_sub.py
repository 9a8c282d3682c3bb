#!/usr/bin/python3
"""bench_sub.py - the generators of bench_sub.sh (rssub's benchmark).

  tree DIR N [--seed S]     N files of 1-4 KiB (sizes and bytes from the
                            seed), in 4 x 5 subdirectories and the top
  static DIR BASE N PART    a static Source of N resources: the Source
                            Description (DIR/.well-known/resourcesync), a
                            Capability List, a Resource List Index of
                            ceil(N / PART) parts; resource K is
                            BASE r/dNNNN/fNNNNNNN, 1,000 per directory, body
                            "x" (what bench_sub.sh's nginx answers for /r/)
      [--bounded K]         also DIR/bounded/: a Capability List and an
                            index naming only the first K parts, for a sync
                            that must fit the free disk
  floor DIR N               the floor of a mirror in DIR: create (and close)
                            N empty files in the tree's 21 directories,
                            print files/s, remove them again

Run with Debian's /usr/bin/python3. Output is deterministic for a seed.
"""
import argparse
import os
import random
import sys

SM = "http://www.sitemaps.org/schemas/sitemap/0.9"
RS = "http://www.openarchives.org/rs/terms/"
HEAD = ('<?xml version="1.0" encoding="UTF-8"?>\n'
        '<%s xmlns="' + SM + '" xmlns:rs="' + RS + '">\n')
# every static resource's body is "x"
X_MD5 = "9dd4e461268c8034f5c8564e155c67a6"
LASTMOD = "2026-01-01T00:00:00Z"
AT = "2026-01-01T00:00:01Z"


def cmd_tree(a):
    r = random.Random(a.seed)
    dirs = [""] + ["s%d/t%d" % (i, j) for i in range(4) for j in range(5)]
    for d in dirs:
        os.makedirs(os.path.join(a.dir, d), exist_ok=True)
    # one random pool, sliced: os.urandom per file would dominate the time
    pool = r.randbytes(1 << 20)
    for k in range(a.n):
        size = r.randint(1024, 4096)
        off = r.randrange(0, len(pool) - size)
        d = dirs[k % len(dirs)]
        with open(os.path.join(a.dir, d, "r%06d.txt" % k), "wb") as f:
            f.write(pool[off:off + size])


def write_index(path, base, capl, parts):
    with open(path, "w") as f:
        f.write(HEAD % "sitemapindex")
        f.write('  <rs:ln rel="up" href="%s"/>\n' % capl)
        f.write('  <rs:md capability="resourcelist" at="%s"/>\n' % AT)
        for p in parts:
            f.write("  <sitemap><loc>%sresourcesync/%s</loc></sitemap>\n"
                    % (base, p))
        f.write("</sitemapindex>\n")


def write_capl(path, base, rl):
    with open(path, "w") as f:
        f.write(HEAD % "urlset")
        f.write('  <rs:ln rel="up" href="%s.well-known/resourcesync"/>\n'
                % base)
        f.write('  <rs:md capability="capabilitylist"/>\n')
        f.write('  <url><loc>%s</loc><rs:md capability="resourcelist"/>'
                '</url>\n' % rl)
        f.write("</urlset>\n")


def cmd_static(a):
    base = a.base if a.base.endswith("/") else a.base + "/"
    rsd = os.path.join(a.dir, "resourcesync")
    os.makedirs(os.path.join(a.dir, ".well-known"), exist_ok=True)
    os.makedirs(rsd, exist_ok=True)
    capl = base + "resourcesync/capabilitylist.xml"
    with open(os.path.join(a.dir, ".well-known", "resourcesync"), "w") as f:
        f.write(HEAD % "urlset")
        f.write('  <rs:md capability="description"/>\n')
        f.write('  <url><loc>%s</loc><rs:md capability="capabilitylist"/>'
                '</url>\n' % capl)
        f.write("</urlset>\n")
    write_capl(os.path.join(rsd, "capabilitylist.xml"), base,
               base + "resourcesync/resourcelist.xml")
    nparts = (a.n + a.part - 1) // a.part
    parts = ["resourcelist-%04d.xml" % i for i in range(nparts)]
    write_index(os.path.join(rsd, "resourcelist.xml"), base, capl, parts)
    for i, name in enumerate(parts):
        lo, hi = i * a.part, min(a.n, (i + 1) * a.part)
        out = [HEAD % "urlset",
               '  <rs:ln rel="up" href="%s"/>\n' % capl,
               '  <rs:ln rel="index" href="%sresourcesync/resourcelist.xml"/>\n'
               % base,
               '  <rs:md capability="resourcelist" at="%s"/>\n' % AT]
        for k in range(lo, hi):
            out.append("  <url><loc>%sr/d%04d/f%07d</loc><lastmod>%s</lastmod>"
                       '<rs:md hash="md5:%s" length="1"/></url>\n'
                       % (base, k // 1000, k, LASTMOD, X_MD5))
        out.append("</urlset>\n")
        with open(os.path.join(rsd, name), "w") as f:
            f.write("".join(out))
    if a.bounded:
        bd = os.path.join(a.dir, "bounded")
        os.makedirs(bd, exist_ok=True)
        write_capl(os.path.join(bd, "capabilitylist.xml"), base,
                   base + "bounded/resourcelist.xml")
        write_index(os.path.join(bd, "resourcelist.xml"), base,
                    base + "bounded/capabilitylist.xml", parts[:a.bounded])


def cmd_floor(a):
    import shutil
    import time
    root = os.path.join(a.dir, "floor")
    dirs = [root] + [os.path.join(root, "s%d/t%d" % (i, j))
                     for i in range(4) for j in range(5)]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    names = [os.path.join(dirs[k % len(dirs)], "r%06d.txt" % k)
             for k in range(a.n)]
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    t0 = time.perf_counter()
    for n in names:
        os.close(os.open(n, flags, 0o644))
    t = time.perf_counter() - t0
    shutil.rmtree(root)
    print("%.0f" % (a.n / t))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("tree")
    q.add_argument("dir")
    q.add_argument("n", type=int)
    q.add_argument("--seed", type=int, default=20130102)
    q.set_defaults(fn=cmd_tree)
    q = sub.add_parser("static")
    q.add_argument("dir")
    q.add_argument("base")
    q.add_argument("n", type=int)
    q.add_argument("part", type=int)
    q.add_argument("--bounded", type=int, default=0)
    q.set_defaults(fn=cmd_static)
    q = sub.add_parser("floor")
    q.add_argument("dir")
    q.add_argument("n", type=int)
    q.set_defaults(fn=cmd_floor)
    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
