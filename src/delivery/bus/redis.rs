//! The bus on Redis pub/sub. To be written.
