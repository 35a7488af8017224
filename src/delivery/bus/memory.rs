//! The bus between nodes inside one process. To be written.
