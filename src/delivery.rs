//! Who gets a frame: the devices on this node and, through the [`bus`], the other nodes.

pub mod bus;
