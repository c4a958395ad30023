//! Background consumers: a message handler retried under the `background`
//! preset, a poison message handed to a dead-letter sink once.
