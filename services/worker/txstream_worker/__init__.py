"""The worker service: a dataflow app's procedure chains as Faust agents.

Faust owns the process, the consumer group and partition assignment; txstream owns the
commit path (DESIGN.md 3.3). The seams are `transport` (what Faust reads and where it
seeks), `host` (the partition engines that follow the assignment) and `agents` (the Faust
app that feeds them).
"""
