//! Stage-I reference evaluator: runs sparse iterations directly in coordinate space.
