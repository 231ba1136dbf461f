"""Leaderboard against its peers (issue 9): the same votes through txstream and through the
architectures S-Store's Table 1 compares with, each result checked against the reference.

Run from the repository root: `.venv/bin/python -m bench.leaderboard_peers --help`.
(Not `bench/leaderboard/`: a directory of that name would shadow the `leaderboard` app
package for every script run from `bench/`.)
"""
