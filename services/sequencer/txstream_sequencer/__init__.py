"""The sequencer service: raw events from any Kafka client become sealed atomic batches.

`events` decodes and checks what users produce, `lanes` holds the sealing and ordering rules
(pure logic, one lane per border-stream partition), `state` is what survives a crash, and
`runtime` ties them to Kafka in transactions that carry the sealed batches, the dead letters,
the lane state and the input offsets together.
"""
