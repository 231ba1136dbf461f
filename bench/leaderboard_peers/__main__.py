"""`python -m bench.leaderboard_peers`."""

from bench.leaderboard_peers.run import main

main()
