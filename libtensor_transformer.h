/*
 * libtensor_transformer.h: the umbrella header of the Transformer, a model
 * library on top of the libtensor core (link libtensor_transformer, CMake
 * target libtensor::transformer, pkg-config module libtensor_transformer; each
 * brings the core with it):
 *     #include <libtensor/libtensor_transformer.h>
 * It includes the core's umbrella header, then the model's headers:
 *   models/transformer/transformer.h  the model (encoder-decoder, decoder-only, encoder-only), KV cache
 *   models/transformer/generate.h     generating with it (lt_transformer_generate, on generate/generate.h)
 *   models/transformer/config.h       its configuration's names, and the configuration in checkpoints;
 *                                     a new run's starting point (--init-from)
 *   models/transformer/hf.h           Hugging Face directories (export and import)
 *   models/transformer/onnx.h         ONNX export (onnxruntime and other consumers)
 *   models/transformer/gguf_model.h   GGUF files for llama.cpp (export and import; checkpoint/gguf.h)
 *   models/transformer/data.h         a training run's data: text, TSV pairs or a task, tokenizer, loader
 *   models/transformer/evaluate.h     validation on the held-out data, decoded examples
 *   models/transformer/lm_eval.h      perplexity of any token sequence, multiple-choice scoring (HellaSwag)
 */
#ifndef LIBTENSOR_TRANSFORMER_H
#define LIBTENSOR_TRANSFORMER_H

#include "libtensor.h"
#include "models/transformer/transformer.h"
#include "models/transformer/generate.h"
#include "models/transformer/config.h"
#include "models/transformer/load.h"
#include "models/transformer/hf.h"
#include "models/transformer/onnx.h"
#include "models/transformer/gguf_model.h"
#include "models/transformer/data.h"
#include "models/transformer/evaluate.h"
#include "models/transformer/lm_eval.h"

#endif
