// ridge._ridge: the extension module under the Python package (python/ridge/, which gives
// it vLLM's names). The GIL is released while the engine works and taken back about every
// 50 ms to run Python's signal handlers, so Ctrl-C stops a call (its requests cancelled);
// ridge's errors arrive as ridge.RidgeError and its subclasses, with ridge's message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "python/llm.h"

namespace py = pybind11;

namespace ridge::python {
namespace {

// Exception types, created at import and kept for the life of the process.
PyObject* g_ridge_error = nullptr;      // RuntimeError
PyObject* g_parameter_error = nullptr;  // RidgeError, ValueError
PyObject* g_model_not_found = nullptr;  // RidgeError, FileNotFoundError

// Python's signal handlers run here (KeyboardInterrupt on Ctrl-C): called from engine
// waits, with the GIL released.
void check_signals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// Generated text is whole UTF-8 characters unless the model emitted invalid bytes; those
// become U+FFFD rather than an exception.
py::str to_str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

py::list to_top_logprobs(const std::vector<std::vector<TokenLogprob>>& per_token) {
  py::list out;
  for (const auto& top : per_token) {
    py::list row;
    for (const TokenLogprob& t : top) row.append(py::make_tuple(t.token, t.logprob));
    out.append(std::move(row));
  }
  return out;
}

// One prompt's request as the Python layer builds it.
struct Request {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 16;  // 0: as many as the context allows
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;

  RequestParams to_params() && {
    RequestParams p;
    p.prompt = std::move(prompt);
    p.max_tokens = max_tokens;
    p.sampling = sampling;
    p.stop = std::move(stop);
    p.ignore_eos = ignore_eos;
    return p;
  }
};

// llm.stream(): text pieces as the engine produces them. Cancels its request when dropped
// before the end.
class TokenStream {
 public:
  explicit TokenStream(std::shared_ptr<RequestStream> stream) : stream_(std::move(stream)) {}
  ~TokenStream() {
    if (!done_) stream_->cancel();
  }
  TokenStream(const TokenStream&) = delete;
  TokenStream& operator=(const TokenStream&) = delete;

  py::str next() {
    while (!done_) {
      StreamEvent ev;
      bool got;
      {
        py::gil_scoped_release release;
        got = next_event(*stream_, ev, check_signals);
      }
      if (!got) break;
      tokens_.insert(tokens_.end(), ev.tokens.begin(), ev.tokens.end());
      if (ev.finished) {
        done_ = true;
        finish_reason_ = finish_reason_name(ev.finish_reason);
        prompt_tokens_ = ev.prompt_tokens;
        if (ev.finish_reason == FinishReason::kError) throw Error(str_cat("generation failed: ", ev.error));
      }
      if (!ev.text.empty()) return to_str(ev.text);
    }
    done_ = true;
    throw py::stop_iteration();
  }

  void cancel() {
    if (!done_) stream_->cancel();
  }
  py::object finish_reason() const { return done_ ? py::object(py::str(finish_reason_)) : py::object(py::none()); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int32_t prompt_tokens() const { return prompt_tokens_; }

 private:
  std::shared_ptr<RequestStream> stream_;
  bool done_ = false;
  std::string finish_reason_;
  std::vector<int32_t> tokens_;
  int32_t prompt_tokens_ = 0;
};

PyObject* new_exception(py::module_& m, const char* name, const char* doc, PyObject* bases) {
  PyObject* type = PyErr_NewExceptionWithDoc(str_cat("ridge._ridge.", name).c_str(), doc, bases, nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(type));  // the module keeps a reference; so does g_*
  return type;
}

void register_exceptions(py::module_& m) {
  g_ridge_error = new_exception(m, "RidgeError", "An error from ridge; the message says what and where.",
                                PyExc_RuntimeError);
  py::tuple parameter_bases = py::make_tuple(py::handle(g_ridge_error), py::handle(PyExc_ValueError));
  g_parameter_error = new_exception(m, "InvalidParameterError",
                                    "A parameter out of range (an LLM option, a sampling parameter, a prompt over "
                                    "the context); the message names it.",
                                    parameter_bases.ptr());
  py::tuple missing_bases = py::make_tuple(py::handle(g_ridge_error), py::handle(PyExc_FileNotFoundError));
  g_model_not_found = new_exception(m, "ModelNotFoundError",
                                    "The model is neither a file nor a model in the cache (scripts/fetch-models).",
                                    missing_bases.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ParameterError& e) {
      PyErr_SetString(g_parameter_error, e.what());
    } catch (const ModelNotFound& e) {
      PyErr_SetString(g_model_not_found, e.what());
    } catch (const EngineError& e) {
      PyErr_SetString(e.status == 400 ? g_parameter_error : g_ridge_error, e.what());
    } catch (const Error& e) {
      PyErr_SetString(g_ridge_error, e.what());
    }
  });
}

}  // namespace
}  // namespace ridge::python

PYBIND11_MODULE(_ridge, m) {
  using namespace ridge;
  using namespace ridge::python;
  m.doc() = "ridge's engine (C++); use it through the ridge package: ridge.LLM";
  register_exceptions(m);

  py::class_<SamplingParams>(m, "Sampling", "engine/sampler.h SamplingParams")
      .def(py::init<>())
      .def_readwrite("temperature", &SamplingParams::temperature)
      .def_readwrite("top_k", &SamplingParams::top_k)
      .def_readwrite("top_p", &SamplingParams::top_p)
      .def_readwrite("min_p", &SamplingParams::min_p)
      .def_readwrite("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_readwrite("presence_penalty", &SamplingParams::presence_penalty)
      .def_readwrite("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_readwrite("repeat_last_n", &SamplingParams::repeat_last_n)
      .def_readwrite("seed", &SamplingParams::seed)
      .def_readwrite("logprobs", &SamplingParams::logprobs)
      .def_readwrite("n_logprobs", &SamplingParams::n_logprobs);

  py::class_<Request>(m, "Request")
      .def(py::init<>())
      .def_readwrite("prompt", &Request::prompt)
      .def_readwrite("max_tokens", &Request::max_tokens)
      .def_readwrite("sampling", &Request::sampling)
      .def_readwrite("stop", &Request::stop)
      .def_readwrite("ignore_eos", &Request::ignore_eos);

  py::class_<Completion>(m, "Completion")
      .def_property_readonly("text", [](const Completion& c) { return to_str(c.text); })
      .def_readonly("tokens", &Completion::tokens)
      .def_readonly("logprobs", &Completion::logprobs)
      .def_property_readonly("top_logprobs", [](const Completion& c) { return to_top_logprobs(c.top_logprobs); })
      .def_property_readonly("finish_reason", [](const Completion& c) { return finish_reason_name(c.finish_reason); })
      .def_readonly("prompt_tokens", &Completion::prompt_tokens)
      .def_readonly("cached_prompt_tokens", &Completion::cached_prompt_tokens)
      .def_readonly("first_token_seconds", &Completion::first_token_seconds)
      .def_readonly("total_seconds", &Completion::total_seconds)
      .def_readonly("spec_drafted", &Completion::spec_drafted)
      .def_readonly("spec_accepted", &Completion::spec_accepted);

  py::class_<PerplexityResult>(m, "PerplexityResult")
      .def_readonly("perplexity", &PerplexityResult::perplexity)
      .def_readonly("error", &PerplexityResult::error)
      .def_readonly("n_windows", &PerplexityResult::n_windows)
      .def_readonly("n_ctx", &PerplexityResult::n_ctx)
      .def_readonly("n_scored", &PerplexityResult::n_scored)
      .def_readonly("seconds", &PerplexityResult::seconds)
      .def("__repr__", [](const PerplexityResult& r) {
        return str_cat("PerplexityResult(perplexity=", r.perplexity, ", error=", r.error, ", n_windows=", r.n_windows,
                       ", n_ctx=", r.n_ctx, ", n_scored=", r.n_scored, ")");
      });

  py::class_<TokenStream>(m, "TokenStream")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &TokenStream::next)
      .def("cancel", &TokenStream::cancel)
      .def_property_readonly("finish_reason", &TokenStream::finish_reason)
      .def_property_readonly("token_ids", &TokenStream::tokens)
      .def_property_readonly("prompt_tokens", &TokenStream::prompt_tokens);

  py::class_<Llm>(m, "Engine")
      .def(py::init([](const std::string& model, int threads, int32_t n_ctx, int32_t max_num_seqs,
                       int32_t max_batch_tokens, double kv_budget_mib, const std::string& kv_type,
                       const std::string& weights, const std::string& spec, const std::string& draft,
                       int32_t draft_max, bool prefix_cache) {
             LlmOptions o{.model = model,
                          .threads = threads,
                          .n_ctx = n_ctx,
                          .max_num_seqs = max_num_seqs,
                          .max_batch_tokens = max_batch_tokens,
                          .kv_budget_mib = kv_budget_mib,
                          .kv_type = kv_type,
                          .weights = weights,
                          .spec = spec,
                          .draft = draft,
                          .draft_max = draft_max,
                          .prefix_cache = prefix_cache};
             py::gil_scoped_release release;
             return std::make_unique<Llm>(o);
           }),
           py::arg("model"), py::kw_only(), py::arg("threads") = 0, py::arg("n_ctx") = 0,
           py::arg("max_num_seqs") = 16, py::arg("max_batch_tokens") = 512, py::arg("kv_budget_mib") = 0.0,
           py::arg("kv_type") = "f16", py::arg("weights") = "as-stored", py::arg("spec") = "none",
           py::arg("draft") = "", py::arg("draft_max") = 8, py::arg("prefix_cache") = true)
      .def(
          "generate",
          [](Llm& llm, std::vector<Request> requests) {
            std::vector<RequestParams> params;
            params.reserve(requests.size());
            for (Request& r : requests) params.push_back(std::move(r).to_params());
            py::gil_scoped_release release;
            return llm.generate(std::move(params), check_signals);
          },
          py::arg("requests"))
      .def(
          "stream",
          [](Llm& llm, Request request) {
            std::shared_ptr<RequestStream> s;
            {
              py::gil_scoped_release release;
              s = llm.submit(std::move(request).to_params());
            }
            return std::make_unique<TokenStream>(std::move(s));
          },
          py::arg("request"))
      .def(
          "chat_prompt",
          [](const Llm& llm, const std::vector<std::pair<std::string, std::string>>& messages,
             bool add_generation_prompt) {
            std::vector<ChatMessage> m;
            for (const auto& [role, content] : messages) m.push_back({role, content});
            py::gil_scoped_release release;
            return llm.chat_prompt(m, add_generation_prompt);
          },
          py::arg("messages"), py::arg("add_generation_prompt") = true)
      .def(
          "perplexity",
          [](Llm& llm, const std::string& text, int32_t n_ctx, int32_t chunks) {
            py::gil_scoped_release release;
            return llm.perplexity(text, n_ctx, chunks, check_signals);
          },
          py::arg("text"), py::arg("n_ctx") = 512, py::arg("chunks") = -1)
      .def(
          "encode",
          [](const Llm& llm, const std::string& text, bool add_special, bool parse_special) {
            py::gil_scoped_release release;
            return llm.encode(text, add_special, parse_special);
          },
          py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = true)
      .def(
          "decode",
          [](const Llm& llm, const std::vector<int32_t>& ids, bool render_special) {
            std::string text;
            {
              py::gil_scoped_release release;
              text = llm.decode(ids, render_special);
            }
            return to_str(text);
          },
          py::arg("ids"), py::arg("render_special") = false)
      .def_property_readonly("n_vocab", &Llm::n_vocab)
      .def_property_readonly("n_ctx", [](const Llm& llm) { return llm.limits().max_request_tokens; })
      .def_property_readonly("model_path", &Llm::model_path)
      .def_property_readonly("description", &Llm::description)
      .def("metrics",
           [](const Llm& llm) {
             const EngineMetrics m = llm.metrics();
             py::dict d;
             d["requests_running"] = m.requests_running;
             d["requests_waiting"] = m.requests_waiting;
             d["kv_blocks_total"] = m.kv_blocks_total;
             d["kv_blocks_used"] = m.kv_blocks_used;
             d["prompt_tokens_total"] = m.prompt_tokens_total;
             d["generation_tokens_total"] = m.generation_tokens_total;
             d["requests_finished_total"] = m.requests_finished_total;
             d["preemptions_total"] = m.preemptions_total;
             d["prefix_cache_hits"] = m.prefix_cache_hits;
             d["prefix_state_checkpoints"] = m.prefix_state_checkpoints;
             d["prefix_cache_queries"] = m.prefix_cache_queries;
             return d;
           })
      .def("close", &Llm::close, py::call_guard<py::gil_scoped_release>());

  m.def("choice_seed", &choice_seed, py::arg("seed"), py::arg("index"),
        "The seed of choice `index` of n completions of one prompt (as the server seeds them)");
}
