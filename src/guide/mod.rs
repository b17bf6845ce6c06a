#![doc = include_str!("index.md")]

#[doc = include_str!("client.md")]
pub mod client {}

#[doc = include_str!("attribute.md")]
pub mod attribute {}

#[doc = include_str!("family.md")]
pub mod family {}

#[doc = include_str!("layer.md")]
pub mod layer {}

#[doc = include_str!("shutdown.md")]
pub mod shutdown {}

#[doc = include_str!("fencing.md")]
pub mod fencing {}

#[doc = include_str!("guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("deployments.md")]
pub mod deployments {}

#[doc = include_str!("hot.md")]
pub mod hot {}

#[doc = include_str!("leader.md")]
pub mod leader {}

#[doc = include_str!("postgres.md")]
pub mod postgres {}

#[doc = include_str!("redisson.md")]
pub mod redisson {}

#[doc = include_str!("lockctl.md")]
pub mod lockctl {}

#[doc = include_str!("observability.md")]
pub mod observability {}

#[doc = include_str!("costs.md")]
pub mod costs {}

#[doc = include_str!("errors.md")]
pub mod errors {}

#[doc = include_str!("development.md")]
pub mod development {}
