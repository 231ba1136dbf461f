"""The worker service: a dataflow app's procedure chains, per partition Faust assigns.

Faust owns the process, the consumer group and partition assignment; txstream owns the
delivery and commit path (docs/architecture.md). The seams are `agents` (the Faust app, subscribed
to the inputs without agents), `transport` (Faust's consumer, paused on every input
partition) and `task_manager` (the partition tasks that follow the assignment, each reading
its own inputs).
"""
