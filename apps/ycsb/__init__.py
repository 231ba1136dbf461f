"""YCSB's core workloads as an app: one `usertable`, read and update transactions."""
