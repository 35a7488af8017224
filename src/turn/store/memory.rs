//! The turn store in process (embedded mode). To be written.
