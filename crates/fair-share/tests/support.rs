//! A small builder for test trees.
#![allow(dead_code)]

use ytsched_common::resources::ResourceVector;
use ytsched_fair_share::*;

pub fn rv(cpu: f64, memory: f64, gpu: f64, user_slots: f64) -> ResourceVector {
    ResourceVector::new(cpu, memory, gpu, user_slots)
}

pub fn cpu(c: f64) -> ResourceVector {
    rv(c, 0.0, 0.0, 0.0)
}

pub const NONE: f64 = f64::INFINITY;

pub struct Tree {
    pub input: TreeInput,
}

impl Tree {
    pub fn new(total: ResourceVector) -> Self {
        Self {
            input: TreeInput {
                total,
                elements: vec![ElementInput::root()],
                integral: IntegralOptions::default(),
                since_previous_s: None,
                truncate_gangs_in_fifo_pools: false,
            },
        }
    }

    fn push(&mut self, e: ElementInput) -> usize {
        self.input.elements.push(e);
        self.input.elements.len() - 1
    }

    pub fn pool(&mut self, parent: usize) -> usize {
        let mut e = ElementInput::root();
        e.parent = Some(parent);
        self.push(e)
    }

    pub fn fifo_pool(&mut self, parent: usize) -> usize {
        let p = self.pool(parent);
        self.set_mode(p, Mode::Fifo);
        p
    }

    pub fn set_mode(&mut self, p: usize, m: Mode) {
        if let ElementKind::Pool { mode, .. } = &mut self.input.elements[p].kind {
            *mode = m;
        }
    }

    /// A guarantee naming only the given components (`NaN` = not named).
    pub fn guarantee(&mut self, p: usize, g: ResourceVector) {
        if let ElementKind::Pool {
            strong_guarantee, ..
        } = &mut self.input.elements[p].kind
        {
            let named = [
                !g.cpu.is_nan(),
                !g.memory.is_nan(),
                !g.gpu.is_nan(),
                !g.user_slots.is_nan(),
            ];
            *strong_guarantee =
                Guarantee::from_vector(g.map(|_, v| if v.is_nan() { 0.0 } else { v }), named);
        }
    }

    pub fn limits(&mut self, e: usize, l: ResourceVector) {
        self.input.elements[e].resource_limits = l;
    }

    pub fn weight(&mut self, e: usize, w: f64) {
        self.input.elements[e].weight = w;
    }

    pub fn integral(&mut self, p: usize, i: IntegralInput) {
        if let ElementKind::Pool { integral, .. } = &mut self.input.elements[p].kind {
            *integral = Some(Box::new(i));
        }
    }

    pub fn op(&mut self, parent: usize, demand: ResourceVector) -> usize {
        self.op_with_usage(parent, demand, ResourceVector::ZERO)
    }

    pub fn op_with_usage(
        &mut self,
        parent: usize,
        demand: ResourceVector,
        usage: ResourceVector,
    ) -> usize {
        let rank = self.input.elements.len() as u64;
        let mut e = ElementInput::root();
        e.parent = Some(parent);
        e.kind = ElementKind::Operation {
            demand,
            usage,
            fifo_rank: rank,
            is_gang: false,
        };
        self.push(e)
    }

    /// Makes operation `o` a gang (SPEC 5.15).
    pub fn gang(&mut self, o: usize) {
        if let ElementKind::Operation { is_gang, .. } = &mut self.input.elements[o].kind {
            *is_gang = true;
        }
    }

    pub fn run(&self) -> TreeOutput {
        compute(&self.input).expect("valid tree")
    }
}

#[track_caller]
pub fn near(actual: ResourceVector, expected: ResourceVector) {
    let ok = ytsched_common::resources::Resource::ALL
        .iter()
        .all(|&r| (actual.get(r) - expected.get(r)).abs() < 1e-6);
    assert!(ok, "expected {expected:?}, got {actual:?}");
}

#[track_caller]
pub fn near_f(actual: f64, expected: f64) {
    assert!(
        (actual - expected).abs() < 1e-6,
        "expected {expected}, got {actual}"
    );
}
