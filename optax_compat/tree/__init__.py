"""Pytree utilities under short names (mirrors ``optax.tree``)."""

from optax_compat.tree_utils import _casting, _random, _state_utils, _tree_math

cast = _casting.tree_cast
cast_like = _casting.tree_cast_like
dtype = _casting.tree_dtype
random_like = _random.tree_random_like
split_key_like = _random.tree_split_key_like
unwrap_random_key_data = _random.tree_unwrap_random_key_data
get = _state_utils.tree_get
get_all_with_path = _state_utils.tree_get_all_with_path
map_params = _state_utils.tree_map_params
set = _state_utils.tree_set
add = _tree_math.tree_add
add_scale = _tree_math.tree_add_scale
allclose = _tree_math.tree_allclose
batch_shape = _tree_math.tree_batch_shape
bias_correction = _tree_math.tree_bias_correction
clip = _tree_math.tree_clip
conj = _tree_math.tree_conj
div = _tree_math.tree_div
full_like = _tree_math.tree_full_like
max = _tree_math.tree_max
min = _tree_math.tree_min
mul = _tree_math.tree_mul
norm = _tree_math.tree_norm
ones_like = _tree_math.tree_ones_like
real = _tree_math.tree_real
scale = _tree_math.tree_scale
size = _tree_math.tree_size
sub = _tree_math.tree_sub
sum = _tree_math.tree_sum
update_infinity_moment = _tree_math.tree_update_infinity_moment
update_moment = _tree_math.tree_update_moment
update_moment_per_elem_norm = _tree_math.tree_update_moment_per_elem_norm
vdot = _tree_math.tree_vdot
where = _tree_math.tree_where
zeros_like = _tree_math.tree_zeros_like
