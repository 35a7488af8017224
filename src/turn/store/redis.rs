//! The turn store on Redis (cluster mode). To be written.
