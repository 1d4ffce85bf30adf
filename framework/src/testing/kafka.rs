//! Placeholder: filled by the kafka-testing branch.
