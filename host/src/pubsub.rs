//! Topic registry shared by native and guest routes.
